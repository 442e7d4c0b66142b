"""compare.characterize.step_profile's batch choice (the batches of the most common shapes, all keys, so one compiled
step runs them all) and its trace reader's split of kernel time by launching HLO instruction, on a stand-in and on a
real recorded GPU trace."""

import gzip
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from compare.characterize.kernel_classes import classify
from compare.characterize.step_profile import common_shape_batches
from compare.kernels.launches import device_events, launches_per_call, per_call_us_by_op


def test_common_shape_batches_take_the_majority_shape_of_every_key():
    def batch(nodes, edges, tag):
        return {"node_mask": np.full((1, nodes), tag, np.float32), "edge_mask": np.zeros((1, edges), np.float32)}

    batches = [batch(8, 16, 0), batch(8, 32, 1), batch(8, 32, 2), batch(16, 32, 3), batch(8, 32, 4), batch(8, 32, 5)]
    chosen = common_shape_batches(batches, steps=3)
    assert [float(b["node_mask"][0, 0]) for b in chosen] == [1.0, 2.0, 4.0]  # same nodes as batch 0, other edges
    assert all(b["edge_mask"].shape == (1, 32) for b in chosen)


def test_per_call_us_by_op_splits_a_kernel_name_by_its_launching_instruction():
    """A trace-shaped stand-in (planes, lines, events with stats): one cuBLAS kernel name launched by a forward and a
    backward GEMM instruction stays two entries; events without the statistic key on ""; host planes are skipped."""
    event = lambda name, ns, **stats: SimpleNamespace(name=name, start_ns=0, duration_ns=ns, stats=list(stats.items()))  # noqa: E731
    gpu = SimpleNamespace(
        name="/device:GPU:0",
        lines=[
            SimpleNamespace(
                events=[
                    event("nvjet_tst_128x64", 4000, hlo_op="custom-call.3", correlation_id=7),
                    event("nvjet_tst_128x64", 2000, hlo_op="custom-call.9"),
                    event("nvjet_tst_128x64", 4000, hlo_op="custom-call.3"),
                    event("loop_add_fusion", 1000),
                ]
            )
        ],
    )
    host = SimpleNamespace(name="/host:CPU", lines=[SimpleNamespace(events=[event("nvjet_tst_128x64", 9000)])])
    got = per_call_us_by_op(SimpleNamespace(planes=[host, gpu]), calls=2)
    assert got == {
        ("nvjet_tst_128x64", "custom-call_3"): 4.0,
        ("nvjet_tst_128x64", "custom-call_9"): 1.0,
        ("loop_add_fusion", ""): 0.5,
    }
    assert list(got) == sorted(got, key=lambda k: -got[k])  # largest first


def test_recorded_gpu_trace_names_each_launch_and_counts_it():
    """A real trace (two mamba2-tiny train steps on an H100 with XLA's command buffers off; fixtures/README.md):
    every kernel event names its launching HLO instruction, our Pallas SSD kernels are there by their own names,
    and the per-step sums and launch counts add up to the trace's events."""
    raw = gzip.decompress((Path(__file__).parents[1] / "fixtures" / "jax-trace-mamba2-tiny.xplane.pb.gz").read_bytes())
    profile = jax.profiler.ProfileData.from_serialized_xspace(raw)
    events = list(device_events(profile))
    assert len(events) > 100
    kernels = [(name, op) for name, op, _ in events if not name.startswith("Memcpy")]
    assert all(op and not op.startswith("command_buffer") for _, op in kernels)
    names = {name for name, _ in kernels}
    assert {"ssd_fwd_fused", "ssd_bwd_dx", "ssd_bwd_dbc", "ssd_bwd_dstates"} <= names
    assert {classify(name) for name in names if name.startswith("ssd_")} == {"SSM"}
    assert any(classify(name) == "GEMM" for name in names)
    by_op = per_call_us_by_op(profile, calls=2)
    assert sum(by_op.values()) == pytest.approx(sum(ns for _, _, ns in events) / 2e3)
    launches = launches_per_call(profile, calls=2)
    assert sum(launches.values()) == pytest.approx(len(events) / 2)
    assert launches["ssd_fwd_fused"] == 2  # one per layer (mamba2-tiny has two) and step


def test_warm_window_runs_one_step_inside_the_window():
    """The counter profiler's target path on the CPU: compile, warm up, then exactly one step inside the window."""
    import contextlib

    from compare.characterize.report import jax_training
    from compare.characterize.step_profile import warm_window

    entered = []

    @contextlib.contextmanager
    def window():
        entered.append("in")
        yield
        entered.append("out")

    with jax_training("mamba1-tiny", ["--batch_size=2", "--seq_len=16"], steps=2) as (setup, batches):
        assert len(batches) == 2
        warm_window(setup, batches, window)
    assert entered == ["in", "out"]
