"""The training loop's throughput accounting (jax_mamba.train.step_clock), with the host clock replaced by a fake one:
which steps' time counts, a new batch shape's first runs left out, data waits, log-window rates."""

import numpy as np
import pytest

from jax_mamba.train import step_clock
from jax_mamba.train.step_clock import NEW_SHAPE_RUNS, TIMING_WARMUP_STEPS, StepClock


@pytest.fixture
def fake_time(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(step_clock.time, "perf_counter", lambda: now[0])
    return now


def test_warmup_steps_do_not_count_and_the_mean_is_over_the_rest(fake_time):
    clock = StepClock(start=0, end=TIMING_WARMUP_STEPS + 8, items_per_step=8)
    assert clock.timed_after == TIMING_WARMUP_STEPS
    fake_time[0] += 5.0  # the warm-up group: compilation
    clock.read(1, TIMING_WARMUP_STEPS, fake_time[0])
    for first in range(TIMING_WARMUP_STEPS + 1, TIMING_WARMUP_STEPS + 9, 2):  # four groups of two steps, 0.5 s each
        fake_time[0] += 0.5
        clock.read(first, 2, fake_time[0])
    summary = clock.summary()
    assert (clock.timed_steps, clock.timed_seconds) == (8, 2.0)
    np.testing.assert_allclose(summary["items_per_s"], 8 * 8 / 2.0)
    assert summary["new_shape_steps_excluded"] == 0 and summary["data_wait_fraction"] == 0.0


def test_a_short_run_times_at_least_one_step(fake_time):
    clock = StepClock(start=4, end=6, items_per_step=1)
    assert clock.timed_after == 5  # at most all steps but one are warm-up


def test_new_shapes_after_the_warmup_run_alone_and_are_left_out(fake_time):
    clock = StepClock(start=0, end=20, items_per_step=4)
    small, large = {"x": np.zeros((2, 8))}, {"x": np.zeros((2, 16))}
    alone = [clock.runs_alone(step, small) for step in range(TIMING_WARMUP_STEPS)]
    alone += [clock.runs_alone(TIMING_WARMUP_STEPS + k, small) for k in range(3)]
    assert not any(alone)  # seen in the warm-up
    late = [clock.runs_alone(10 + k, large) for k in range(NEW_SHAPE_RUNS + 2)]
    assert late == [True] * NEW_SHAPE_RUNS + [False, False]
    for _ in range(NEW_SHAPE_RUNS):
        clock.ran_alone(1.5)
    fake_time[0] += 10.0
    clock.read(TIMING_WARMUP_STEPS + 1, 10, fake_time[0])
    summary = clock.summary()
    assert summary["new_shape_steps_excluded"] == NEW_SHAPE_RUNS
    np.testing.assert_allclose(summary["items_per_s"], 4 * (10 - NEW_SHAPE_RUNS) / (10.0 - 1.5 * NEW_SHAPE_RUNS))


def test_data_waits_count_only_for_timed_steps(fake_time):
    clock = StepClock(start=0, end=10, items_per_step=1)
    clock.waited_for_data(0, 7.0)  # warm-up: not counted
    clock.waited_for_data(TIMING_WARMUP_STEPS, 0.25)
    fake_time[0] += 1.0
    clock.read(TIMING_WARMUP_STEPS + 1, 4, fake_time[0])
    np.testing.assert_allclose(clock.summary()["data_wait_fraction"], 0.25)


def test_log_window_rate_restarts_after_each_line_and_pauses_do_not_count(fake_time):
    clock = StepClock(start=0, end=100, items_per_step=10)
    fake_time[0] += 2.0
    clock.read(1, 5, fake_time[0])
    fake_time[0] += 3.0
    clock.read(6, 5, fake_time[0])
    np.testing.assert_allclose(clock.window_rate(fake_time[0]), 10 * 10 / 5.0)
    fake_time[0] += 60.0  # an evaluation
    clock.paused()
    fake_time[0] += 1.0
    clock.read(11, 5, fake_time[0])
    np.testing.assert_allclose(clock.window_rate(fake_time[0]), 10 * 5 / 61.0)  # the log window spans the pause
    np.testing.assert_allclose(clock.timed_seconds, 3.0 + 1.0)  # the timed mean does not
