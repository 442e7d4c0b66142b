"""The training loop's throughput accounting: which steps' time counts, the rate of each log line's window, the mean
over the timed steps and the share of it spent waiting for data.

Steps are dispatched back to back and read in groups (``jax_mamba.train.loop``); a group's time runs from the previous
read point (or the end of an evaluation or a save) to its read, so dispatching, waiting for data and for the device
all count. Not counted: the first ``TIMING_WARMUP_STEPS`` steps (compilation, autotuning, first kernel loads: the same
warm-up as the PyTorch side's ``torch_reference.train_bench --warmup``), evaluation, saving, and a batch shape's first
``NEW_SHAPE_RUNS`` runs when the shape is first seen after the warm-up (graph size buckets): the first run compiles,
and XLA does one-time work in the second too (1.25 s against 16 ms for later steps, peptides-func on an H100). Those
runs execute alone (the queue drained before, the result awaited after) and neither their seconds nor their items
count.
"""

import collections
import time

import jax
import numpy as np

TIMING_WARMUP_STEPS = 3
NEW_SHAPE_RUNS = 2


class StepClock:
    """Timing of steps ``start + 1 .. end`` (step numbers count completed steps), ``items_per_step`` items each."""

    def __init__(self, start: int, end: int, items_per_step: int):
        self.items_per_step = items_per_step
        self.timed_after = start + min(TIMING_WARMUP_STEPS, max(end - start - 1, 1))  # later steps are timed
        self.timed_steps, self.timed_seconds, self.data_wait = 0, 0.0, 0.0
        self.new_shape_steps, self.new_shape_seconds = 0, 0.0
        self._shape_runs: collections.Counter = collections.Counter()
        self._previous_end = self._window_start = time.perf_counter()
        self._window_steps = 0

    def waited_for_data(self, step: int, seconds: float) -> None:
        """``seconds`` the loop waited for the batch of ``step`` (0-based: the step about to run)."""
        if step >= self.timed_after:
            self.data_wait += seconds

    def runs_alone(self, step: int, batch) -> bool:
        """Whether ``step`` (0-based) must run alone: its batch's shape is new since the warm-up and has run fewer
        than ``NEW_SHAPE_RUNS`` times. Counts the run."""
        shape = tuple(np.shape(x) for x in jax.tree.leaves(batch))
        if step < self.timed_after:  # the warm-up absorbs this shape's first runs
            self._shape_runs[shape] = NEW_SHAPE_RUNS
        alone = self._shape_runs[shape] < NEW_SHAPE_RUNS
        self._shape_runs[shape] += 1
        return alone

    def ran_alone(self, seconds: float) -> None:
        self.new_shape_steps += 1
        self.new_shape_seconds += seconds

    def read(self, first: int, count: int, now: float) -> None:
        """``count`` steps from step ``first`` (1-based) were read at ``now``: their time counts if past the warm-up."""
        self._window_steps += count
        if first > self.timed_after:
            self.timed_steps += count
            self.timed_seconds += now - self._previous_end
        self._previous_end = now

    def window_rate(self, now: float) -> float:
        """Items per second since the previous log line (read points ending at log steps), which starts the next
        window."""
        rate = self.items_per_step * self._window_steps / max(now - self._window_start, 1e-9)
        self._window_start, self._window_steps = now, 0
        return rate

    def paused(self) -> None:
        """An evaluation or a save ended: its time does not count."""
        self._previous_end = time.perf_counter()

    def summary(self) -> dict:
        """Mean items per second over the timed steps (None if none), the share of their time spent waiting for
        data, and the new-shape runs left out."""
        seconds, steps = self.timed_seconds - self.new_shape_seconds, self.timed_steps - self.new_shape_steps
        timed = steps > 0 and seconds > 0
        return {
            "items_per_s": self.items_per_step * steps / seconds if timed else None,
            "data_wait_fraction": self.data_wait / seconds if timed else None,
            "new_shape_steps_excluded": self.new_shape_steps,
            "new_shape_seconds_excluded": self.new_shape_seconds,
        }
