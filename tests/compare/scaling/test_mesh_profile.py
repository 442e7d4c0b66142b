"""compare.scaling.mesh_profile: its interval arithmetic against a brute-force timeline, its split of NCCL kernels by
collective, a per-device breakdown on a stand-in and on a real recorded GPU trace, one run set beside another, and
the command on the CPU."""

import collections
import gzip
import itertools
import json
import os
from pathlib import Path

import jax
import numpy as np
import pytest

from compare.scaling.mesh_profile import (
    beside,
    collective_kind,
    covered_ns,
    device_breakdown,
    device_timelines,
    idle_gaps,
    main,
    scope_group,
    uncovered_ns,
    union_ns,
)


def random_intervals(rng, count: int, span: int) -> list[tuple[int, int]]:
    starts = rng.integers(0, span, count)
    return [(int(s), int(s + rng.integers(0, span // 4 + 1))) for s in starts]


def painted(intervals, span: int) -> np.ndarray:
    """One flag per ns: is it inside any interval (the brute-force truth)."""
    flags = np.zeros(span * 2, bool)
    for start, end in intervals:
        flags[start:end] = True
    return flags


@pytest.mark.parametrize("count", [0, 1, 7, 40])
def test_union_and_uncovered_time_match_a_painted_timeline(count, rng):
    span = 500
    collectives, compute = random_intervals(rng, count, span), random_intervals(rng, rng.integers(0, 30), span)
    merged = union_ns(collectives)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(merged))  # sorted, disjoint, not touching
    assert covered_ns(merged) == painted(collectives, span).sum()
    exposed = painted(collectives, span) & ~painted(compute, span)
    assert uncovered_ns(merged, union_ns(compute)) == exposed.sum()


def test_touching_intervals_merge_and_a_fully_covered_collective_is_hidden():
    assert union_ns([(5, 9), (0, 5), (20, 30), (22, 25)]) == [(0, 9), (20, 30)]
    assert uncovered_ns([(10, 20)], [(0, 12), (15, 40)]) == 3
    assert uncovered_ns([(10, 20)], [(0, 40)]) == 0
    assert uncovered_ns([(10, 20), (50, 60)], []) == 20


@pytest.mark.parametrize(
    ("kernel", "op", "kind"),
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all-reduce-start_2", "all-reduce"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "", "all-gather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "", "reduce-scatter"),
        ("ncclDevKernel_SendRecv", "all-to-all_1", "send/recv"),
        ("ncclDevKernel_Generic", "all-to-all_1", "all-to-all"),
        ("ncclDevKernel_Generic", "", "other collective"),
        ("loop_all_reduce_fusion", "all-reduce_fusion", None),  # an XLA kernel, not a collective
        ("nvjet_tst_128x64", "custom-call_3", None),
    ],
)
def test_collective_kind_reads_nccl_kernels_only(kernel, op, kind):
    assert collective_kind(kernel, op) == kind


def test_device_breakdown_counts_overlap_once_and_exposes_only_uncovered_collectives():
    """Two steps' events: compute 0-60 and 50-100 us (union 100), an all-reduce at 80-130 (30 us not under compute)
    and an all-gather at 140-150 (all of it exposed); all kernels cover 140 us of the 2 x 100 us wall."""
    us = 1000
    events = [
        ("gemm_fusion_dot_1", "gemm_fusion_dot_1", 0, 60 * us),
        ("ssd_bwd_dx", "", 50 * us, 50 * us),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all-reduce-start_1", 80 * us, 50 * us),
        ("ncclDevKernel_AllGather_RING_LL", "all-gather-start", 140 * us, 10 * us),
    ]
    scopes = {"gemm_fusion_dot_1": "jit(step)/transpose(jvp(LMHeadModel))/backbone/layers_3/mixer/in_proj/dot_general"}
    got = device_breakdown(events, steps=2, wall_ms=0.1, scopes=scopes)
    assert got["compute_ms"] == pytest.approx(0.05)
    assert got["collective_ms"] == pytest.approx(0.03)
    assert got["exposed_collective_ms"] == pytest.approx(0.02)
    assert got["idle_ms"] == pytest.approx(0.1 - 0.14 / 2)
    assert got["collective_ms_by_kind"] == {"all-reduce": 0.025, "all-gather": 0.005}
    assert list(got["largest_collectives_ms"]) == ["all-reduce: all-reduce-start_1", "all-gather: all-gather-start"]
    assert got["compute_ms_by_kernel"] == {"gemm_fusion_dot_1": 0.03, "ssd_bwd_dx": 0.025}
    assert got["compute_ms_by_class"] == {"GEMM": 0.03, "SSM": 0.025}  # by their names
    assert got["compute_ms_by_scope"] == {
        "transpose(jvp(LMHeadModel))/backbone/layers_*/mixer/in_proj/dot_general": 0.03,
        "(no scope) ssd_bwd_dx": 0.025,
    }
    # the one gap inside the trace, 130-140 us, after the all-reduce and before the all-gather (no scopes: kernels)
    assert got["gap_ms"] == pytest.approx(0.005)
    place = "ncclDevKernel_AllReduce_Sum_f32_RING_LL -> ncclDevKernel_AllGather_RING_LL"
    assert got["largest_gaps_ms"] == {place: 0.005}


def test_idle_gaps_are_summed_by_the_kernels_around_them(rng):
    """A painted timeline of random kernels with random holes: every hole is found once, attributed to the kernel
    that ends last before it and the one that starts first after it, and the gaps add up to the span's idle time."""
    events, t, holes = [], 0, collections.Counter()
    names = ["a", "b", "c"]
    for k in range(200):
        name = names[rng.integers(3)]
        duration = int(rng.integers(1, 50))
        events.append((name, "", t, duration))
        inner = int(rng.integers(0, duration))  # a shorter kernel inside it, ending earlier: never the last one
        events.append(("inner", "", t + inner, int(rng.integers(0, duration - inner))))
        t += duration
        hole = int(rng.integers(0, 3)) * int(rng.integers(1, 20))
        if hole and k < 199:  # a hole after the last kernel is outside the traced span
            holes[name] += hole
            t += hole
    order = rng.permutation(len(events))
    shuffled = [events[i] for i in order]
    busy = union_ns((start, start + duration) for _, _, start, duration in shuffled)
    got = idle_gaps(shuffled, busy, lambda kernel, op: kernel)
    assert sum(got.values()) == (busy[-1][1] - busy[0][0]) - covered_ns(busy)
    assert all(after in names for _, after in got)  # a gap ends where a main kernel starts
    by_before = collections.Counter()
    for (before, _), ns in got.items():
        by_before[before] += ns
    assert by_before == +holes


def test_scope_groups_fold_layer_and_instance_numbers_only():
    got = scope_group("jit(step)/jvp(Model)/layers_17/mixer/dot_general_3")
    assert got == "jvp(Model)/layers_*/mixer/dot_general_*"
    assert scope_group("transpose(jvp(layers_2))/x1/conv2d") == "transpose(jvp(layers_*))/x1/conv2d"


def test_recorded_gpu_trace_gives_one_timeline_per_gpu_plane():
    """The real H100 trace of compare's fixtures (two mamba2-tiny steps, one GPU): one device timeline, no
    collectives, compute time equal to the union of its kernels."""
    raw = gzip.decompress((Path(__file__).parents[1] / "fixtures" / "jax-trace-mamba2-tiny.xplane.pb.gz").read_bytes())
    timelines = device_timelines(jax.profiler.ProfileData.from_serialized_xspace(raw))
    assert list(timelines) == ["/device:GPU:0"]
    events = timelines["/device:GPU:0"]
    assert len(events) > 100 and any(name == "ssd_bwd_dx" for name, *_ in events)
    got = device_breakdown(events, steps=2, wall_ms=10.0)
    assert got["collective_ms"] == 0 and got["exposed_collective_ms"] == 0
    union = covered_ns(union_ns((start, start + duration) for _, _, start, duration in events))
    assert got["compute_ms"] == pytest.approx(union / 2e6, abs=1e-3)
    assert 0 < got["compute_ms"] < 10.0 and got["idle_ms"] == pytest.approx(10.0 - got["compute_ms"], abs=1e-3)


def test_command_on_the_cpu_reports_the_step_and_writes_both_files(tmp_path, capsys, monkeypatch):
    """With --name_launches: XLA's command buffers off for the process (the flag set before the run), noted."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    out = tmp_path / "profile"
    argv = ["--config", "mamba1-tiny", "--steps", "2", "--batch_size=2", "--seq_len=16", "--name_launches"]
    assert main([*argv, "--out", str(out)]) == 0
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1 --xla_gpu_enable_command_buffer="
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["launches_named"] is True and "Command buffers off" in out.with_suffix(".md").read_text()
    assert report["mesh"] == {"data": 1, "fsdp": 1, "context": 1} and report["steps"] == 2
    assert report["step_wall_ms"] > 0
    assert report["items_per_s"] == pytest.approx(2 * 16 / report["step_wall_ms"] * 1e3, rel=1e-3)  # both rounded
    assert report["devices"] == {}  # the CPU's trace has no device timelines
    assert "not a GPU run" in out.with_suffix(".md").read_text()


def test_command_refuses_a_step_count_below_one_and_a_beside_that_is_no_report(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--config", "mamba1-tiny", "--steps", "0"])
    (tmp_path / "other.json").write_text('{"points": []}')
    for path in (tmp_path / "missing.json", tmp_path / "other.json"):
        with pytest.raises(SystemExit):
            main(["--config", "mamba1-tiny", "--beside", str(path)])
        assert "--beside" in capsys.readouterr().err


def test_beside_sets_one_run_against_another_by_part_class_and_most_changed_scopes():
    def report(wall, compute, classes, scopes):
        device = {"compute_ms": compute, "exposed_collective_ms": wall - compute, "idle_ms": 0.0}
        device |= {"compute_ms_by_class": classes, "compute_ms_by_scope": scopes}
        return {"step_wall_ms": wall, "mesh": {"data": 2}, "batch_size": 8, "devices": {"/device:GPU:0": device}}

    one = report(100.0, 100.0, {"GEMM": 50.0, "SSM": 50.0}, {"head/dot": 6.0, "mixer/dot": 40.0, "norm": 4.0})
    two = report(110.0, 106.0, {"GEMM": 56.0, "SSM": 50.0, "copy/other": 0.5}, {"head/dot": 12.0, "mixer/dot": 40.5})
    lines = beside(two, one, "one.json", top=2)
    table = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in lines if line.startswith("| ")}
    assert table["wall"] == ["110.0", "100.0", "+10.0 |"]
    assert table["exposed_collective"] == ["4.0", "0.0", "+4.0 |"]
    assert table["class: GEMM"] == ["56.0", "50.0", "+6.0 |"] and table["class: copy/other"][2] == "+0.5 |"
    moved_most = ["scope: head/dot", "scope: norm"]
    assert [k for k in table if k.startswith("scope: ")] == moved_most
    assert table["scope: norm"] == ["0.0", "4.0", "-4.0 |"]
    assert beside(two, {**one, "devices": {}}, "cpu.json") == []  # a CPU report has no device to set beside
