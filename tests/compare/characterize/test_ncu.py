"""compare.characterize.ncu on the CPU: metric choice from ncu's query output, the kernel filter, the command line, and
the reading of a real ncu CSV (recorded on an H100, ``fixtures/``) into per-kernel counters and derived figures."""

import gzip
import re
from pathlib import Path

import pytest

from compare.characterize.ncu import (
    METRICS,
    aggregate,
    available_bases,
    by_function,
    choose_kernels,
    choose_metrics,
    derived,
    function_base,
    kernel_filter,
    ncu_command,
    parse_raw_csv,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "ncu-torch-mamba2-tiny.csv.gz"
JAX_FIXTURE = Path(__file__).parents[1] / "fixtures" / "ncu-jax-mamba2-130m-2layer.csv.gz"


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("_chunk_scan_fwd_kernel", "_chunk_scan_fwd_kernel"),
        ("loop_add_fusion_1", "loop_add_fusion_1"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<M<4>, F<float, 4, (A)1, false>>(M<4>)",
         "multi_tensor_apply_kernel"),
        ("void causal_conv1d_fwd_kernel<T<128, 4, true, c10::BFloat16>, false>(ConvParamsBase)",
         "causal_conv1d_fwd_kernel"),
        ("void at::native::unrolled_elementwise_kernel<at::native::k(at::T&)::{lambda()#3}::operator()() const, "
         "std::array<char*, 2ul>, 4>(int)", "unrolled_elementwise_kernel"),
    ],
)  # fmt: skip
def test_function_base_strips_return_type_namespaces_templates_and_parameters(name, base):
    assert function_base(name) == base


def test_kernel_filter_matches_exactly_the_named_functions():
    names = ["ssd_bwd_dx", "a.b+c", "x(1)|[y]", "_chunk_scan_fwd_kernel"]
    pattern = kernel_filter(names)
    assert pattern.startswith("regex:")
    for name in names:
        assert re.fullmatch(pattern[len("regex:") :], name)
    for other in ["ssd_bwd_dx2", "aXb+c", "ssd_bwd", "x1|y"]:
        assert not re.fullmatch(pattern[len("regex:") :], other)


QUERY = """Device NVIDIA H100 80GB HBM3 (GH100)
--------------------------------------- --------------- --------------- ------------------------
Metric Name                             Metric Type     Metric Unit     Metric Description
--------------------------------------- --------------- --------------- ------------------------
dram__bytes_read                        Counter         byte            # of bytes read from DRAM
gpu__time_duration                      Counter         nsecond         total duration in nanoseconds
sm__inst_executed_pipe_xu               Counter         inst            # of warp instructions executed by xu pipe
sm__pipe_tensor_cycles_active           Counter         cycle           # of cycles where tensor pipe was active
"""


def test_metric_choice_takes_the_first_available_candidate_and_always_the_launch_attributes():
    available = available_bases(QUERY)
    assert available == {
        "dram__bytes_read",
        "gpu__time_duration",
        "sm__inst_executed_pipe_xu",
        "sm__pipe_tensor_cycles_active",
    }
    chosen = choose_metrics(available)
    assert chosen["dram_read_bytes"] == "dram__bytes_read.sum"
    assert chosen["xu_pipe_pct"] == "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"  # the fallback
    assert chosen["grid_size"] == "launch__grid_size" and chosen["waves"] == "launch__waves_per_multiprocessor"
    assert "dram_write_bytes" not in chosen and "fma_pipe_pct" not in chosen  # not on this (pretend) GPU
    assert choose_metrics(None) == {field: names[0] for field, names in METRICS.items()}


def test_command_leaves_the_clocks_alone_and_waits_for_the_capture_range(tmp_path):
    command = ncu_command(["python", "-m", "x"], ["k1", "k2"], 7, ["gpu__time_duration.sum"], tmp_path / "r")
    joined = " ".join(command)
    assert "--clock-control none" in joined and "--profile-from-start off" in joined
    assert "--target-processes application-only" in joined  # never the compilers a JAX target starts
    assert "--launch-count 7" in joined and "--kernel-name regex:^(k1|k2)$" in joined
    assert command[-3:] == ["python", "-m", "x"]
    assert "--kernel-name" not in ncu_command(["t"], None, 7, ["m"], tmp_path / "r")


def test_recorded_csv_reads_into_per_kernel_counters():
    chosen = choose_metrics(None)
    launches = parse_raw_csv(gzip.decompress(FIXTURE.read_bytes()).decode(), chosen)
    assert len(launches) == 30 and all(launch["duration_ns"] > 0 for launch in launches)
    first = launches[0]  # the CSV's first row, read by hand: 3,392 ns, 135,424 bytes read, grid 512, 0.12 waves
    assert first["kernel"] == "_layer_norm_fwd_1pass_kernel"
    assert first["duration_ns"] == 3392 and first["dram_read_bytes"] == 135424
    assert first["grid_size"] == 512 and first["waves"] == pytest.approx(0.12)
    kernels = aggregate(launches)
    assert sum(k["launches"] for k in kernels.values()) == 30
    scan = kernels["_chunk_scan_fwd_kernel"]
    runs = [launch for launch in launches if launch["kernel"] == "_chunk_scan_fwd_kernel"]
    assert scan["launches"] == len(runs) == 2
    assert scan["duration_ns"] == pytest.approx(sum(r["duration_ns"] for r in runs))
    weighted = sum(r["l2_hit_pct"] * r["duration_ns"] for r in runs) / sum(r["duration_ns"] for r in runs)
    assert scan["l2_hit_pct"] == pytest.approx(weighted)
    summary = derived(scan, copy_gbs=3000.0)
    dram = scan["dram_read_bytes"] + scan["dram_write_bytes"]
    assert summary["dram_gbs"] == pytest.approx(dram / scan["duration_ns"])  # bytes per ns = GB/s
    assert summary["dram_pct_of_copy"] == pytest.approx(100 * summary["dram_gbs"] / 3000.0)
    assert 0 < summary["dram_gbs"] < 4000 and summary["tensor_flops_per_launch"] > 0


def test_recorded_jax_csv_names_pallas_kernels_by_their_own_names():
    launches = parse_raw_csv(gzip.decompress(JAX_FIXTURE.read_bytes()).decode(), choose_metrics(None))
    kernels = aggregate(launches)
    assert {"ssd_fwd_fused", "ssd_bwd_dx", "ssd_bwd_dbc", "ssd_bwd_dstates"} <= set(kernels)
    assert all(kernels[name]["launches"] == 2 for name in ("ssd_fwd_fused", "ssd_bwd_dx"))  # two layers
    first = next(launch for launch in launches if launch["kernel"] == "ssd_fwd_fused")
    # the CSV's first ssd_fwd_fused row, read by hand: 188,256 ns, 60,985,344 B read, 153,723,392 B written, grid 192
    assert first["duration_ns"] == 188256 and first["dram_read_bytes"] == 60985344
    assert first["dram_write_bytes"] == 153723392 and first["grid_size"] == 192
    assert first["waves"] == pytest.approx(0.73)


def test_units_are_scaled_to_bytes_and_nanoseconds():
    chosen = {"duration_ns": "gpu__time_duration.sum", "dram_read_bytes": "dram__bytes_read.sum"}
    text = (
        '"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"\n'
        '"","","usecond","Kbyte"\n'
        '"0","k","1.50","2,048"\n'
        '"1","k","n/a","1"\n'
    )
    launches = parse_raw_csv("==PROF== noise\n" + text, chosen)
    assert launches[0] == {"kernel": "k", "duration_ns": 1500.0, "dram_read_bytes": 2048e3}
    assert launches[1] == {"kernel": "k", "dram_read_bytes": 1e3}  # an unreadable value is left out, not zero


def test_derived_figures():
    counters = {
        "launches": 2, "duration_ns": 4000.0, "dram_read_bytes": 6e6, "dram_write_bytes": 2e6, "ffma": 1e6,
        "fadd": 2e6, "tensor_flops": 4e7, "waves": 4.0, "tensor_pipe_pct": 10.0, "fma_pipe_pct": 30.0,
        "alu_pipe_pct": 5.0, "xu_pipe_pct": 20.0,
    }  # fmt: skip
    out = derived(counters, copy_gbs=2000.0)
    assert out["us_per_launch"] == pytest.approx(2.0) and out["dram_bytes_per_launch"] == pytest.approx(4e6)
    assert out["dram_gbs"] == pytest.approx(2000.0) and out["dram_pct_of_copy"] == pytest.approx(100.0)
    assert out["vector_flops_per_launch"] == pytest.approx(2e6) and out["tensor_flops_per_launch"] == 2e7
    assert out["arithmetic_intensity"] == pytest.approx(44e6 / 8e6)
    assert out["tensor_to_vector_flops"] == pytest.approx(10.0)
    assert out["block_lifetime_us"] == pytest.approx(0.5)  # 2 us per launch over 4 waves
    assert out["vector_bound"] is True
    assert derived({"launches": 1, "duration_ns": 10.0}, None)["arithmetic_intensity"] is None


def test_kernel_choice_by_function_within_the_launch_cap():
    us = {
        "void f<1>(int)": 50.0, "void f<2>(int)": 60.0,  # one function: 110 us, 30 launches
        "big_kernel": 100.0, "many_launches": 90.0, "small": 5.0, "Memcpy DtoH (Device -> Pinned)": 500.0,
    }  # fmt: skip
    launches = {"void f<1>(int)": 10, "void f<2>(int)": 20, "big_kernel": 4, "many_launches": 500, "small": 1}
    assert by_function(us)["f"] == 110.0
    assert choose_kernels(us, launches, count=10, max_launches=40) == (["f", "big_kernel", "small"], 35)
    assert choose_kernels(us, launches, count=1, max_launches=40) == (["f"], 30)
