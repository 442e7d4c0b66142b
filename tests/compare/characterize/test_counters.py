"""compare.characterize.counters and the report with counters, on the CPU: ncu's per-function counters joined to
the trace's kernels (templated instantiations together), a failed ncu run reported instead of crashing, the
headline figures, and the report's counters table, roofline and bandwidth histogram."""

import sys

import pytest

from compare.characterize import counters as characterize_counters
from compare.characterize.counters import headline, side_counters
from compare.characterize.ncu import NcuError, aggregate
from compare.characterize.report import write_report

CEILINGS = {"copy_gbs": 3000.0, "matmul_tflops": 800.0, "vector_tflops": 67.0}


def torch_like_side() -> dict:
    totals = {
        "_chunk_scan_fwd_kernel": {"us": 400.0, "category": "SSM"},
        "void at::native::vectorized_elementwise_kernel<4, A>(int)": {"us": 100.0, "category": "elementwise/fusion"},
        "void at::native::vectorized_elementwise_kernel<8, B>(int)": {"us": 50.0, "category": "elementwise/fusion"},
        "nvjet_tst_128x64": {"us": 300.0, "category": "GEMM"},
        "Memcpy DtoH (Device -> Pinned)": {"us": 150.0, "category": "copy/other"},
    }
    categories = dict.fromkeys(
        ("GEMM", "SSM", "attention", "convolution", "normalization", "elementwise/fusion", "reduction", "optimizer",
         "copy/other", "unclassified"), 0.0,
    )  # fmt: skip
    categories |= {"SSM": 0.4, "elementwise/fusion": 0.15, "GEMM": 0.3, "copy/other": 0.15}
    return {
        "framework": "torch",
        "device": "NVIDIA H100 80GB HBM3",
        "version": "torch x",
        "steps_profiled": 2,
        "step_wall_ms": 1.5,
        "device_ms": 1.0,
        "unclassified_share": 0.0,
        "categories_ms": categories,
        "phases_ms": {p: dict.fromkeys(categories, 0.0) for p in ("forward", "backward", "optimizer", "other")},
        "kernels": [],
        "kernel_totals": totals,
        "launches": {k: 2.0 for k in totals},
    }


def fake_ncu(found: list[str]):
    def profile_kernels(target, names, launches, report, timeout_s):
        rows = []
        for name in found:
            tensor = 2e9 if "chunk" in name else 0.0
            rows += [
                {"kernel": name, "duration_ns": 2e5, "dram_read_bytes": 3e8, "dram_write_bytes": 1e8, "ffma": 1e8,
                 "tensor_flops": tensor, "waves": 2.0, "dram_peak_pct": 40.0, "tensor_pipe_pct": 10.0,
                 "fma_pipe_pct": 30.0 if "chunk" in name else 5.0},
            ] * 2  # fmt: skip
        profile_kernels.called = (target, names, launches)
        return aggregate(rows), {"metrics": {}, "command": "ncu --clock-control none"}

    return profile_kernels


def test_counters_join_the_trace_by_function_name(monkeypatch, tmp_path):
    fake = fake_ncu(["_chunk_scan_fwd_kernel", "vectorized_elementwise_kernel"])
    monkeypatch.setattr(characterize_counters, "profile_kernels", fake)
    side = torch_like_side()
    counters = side_counters(side, "mamba2-tiny", ["--batch_size=2"], tmp_path, CEILINGS, 8, 100)
    target, names, launches = fake.called
    assert target[-3:] == ["--ncu-window", "--steps=1", "--batch_size=2"]
    assert names == ["_chunk_scan_fwd_kernel", "nvjet_tst_128x64", "vectorized_elementwise_kernel"]
    assert launches == 8  # two launches each; the memcpy is no kernel
    assert counters["unmatched"] == ["nvjet_tst_128x64"] and counters["target_overrides"] == ["--batch_size=2"]
    elementwise = next(k for k in counters["kernels"] if k["kernel"] == "vectorized_elementwise_kernel")
    assert elementwise["us"] == 150.0 and elementwise["category"] == "elementwise/fusion"
    assert counters["coverage"] == pytest.approx(0.55)
    scan = counters["kernels"][0]
    assert scan["dram_gbs"] == pytest.approx(2000.0) and scan["dram_pct_of_copy"] == pytest.approx(200 / 3)


def test_the_jax_target_is_primed_with_its_compile_cache_before_ncu(monkeypatch, tmp_path):
    fake = fake_ncu(["_chunk_scan_fwd_kernel"])
    monkeypatch.setattr(characterize_counters, "profile_kernels", fake)
    primed = []
    monkeypatch.setattr(characterize_counters, "prime", lambda target, timeout_s: primed.append(list(target)))
    side = {**torch_like_side(), "framework": "jax"}
    side_counters(side, "mamba2-tiny", ["--n_layer=2"], tmp_path, CEILINGS, 8, 100)
    target = fake.called[0]
    assert primed == [target]  # the same command, run once without ncu first
    assert target[1:5] == ["-m", "compare.characterize.ncu_target", "--config", "mamba2-tiny"]
    assert target[-3] == "--n_layer=2" and target[-2] == "--compile-cache"
    side_counters(torch_like_side(), "mamba2-tiny", [], tmp_path, CEILINGS, 8, 100)
    assert len(primed) == 1 and "--compile-cache" not in fake.called[0]  # PyTorch compiles nothing to cache


def test_a_failed_warm_up_run_is_reported_with_its_output(monkeypatch, tmp_path):
    monkeypatch.setattr(characterize_counters, "profile_kernels", fake_ncu([]))
    failing = [sys.executable, "-c", "print('boom'); exit(3)"]
    monkeypatch.setattr(characterize_counters, "ncu_target", lambda *a: list(failing))
    counters = side_counters({**torch_like_side(), "framework": "jax"}, "mamba2-tiny", [], tmp_path, CEILINGS, 8, 100)
    assert counters["kernels"] == [] and "warm-up run failed (3)" in counters["error"] and "boom" in counters["error"]


def test_a_failed_ncu_run_is_reported_not_raised(monkeypatch, tmp_path):
    def fails(*args):
        raise NcuError("ncu failed (timeout after 9 s):\n==PROF== Connected")

    monkeypatch.setattr(characterize_counters, "profile_kernels", fails)
    side = torch_like_side()
    side["counters"] = side_counters(side, "mamba2-tiny", [], tmp_path, CEILINGS, 8, 100)
    assert side["counters"]["kernels"] == [] and "timeout after 9 s" in side["counters"]["error"]
    assert "dram_pct_of_peak" not in headline(side)
    write_report("mamba2-tiny", [side], tmp_path / "r", "cmd", [], CEILINGS)
    assert "ncu gave no counters" in (tmp_path / "r" / "report.md").read_text()
    assert not (tmp_path / "r" / "roofline.png").exists()


def test_headline_and_report_with_counters(monkeypatch, tmp_path):
    monkeypatch.setattr(
        characterize_counters, "profile_kernels", fake_ncu(["_chunk_scan_fwd_kernel", "vectorized_elementwise_kernel"])
    )
    side = torch_like_side()
    side["counters"] = side_counters(side, "mamba2-tiny", ["--n_layer=1"], tmp_path, CEILINGS, 8, 100)
    figures = headline(side)
    assert figures["gemm_share"] == pytest.approx(0.3) and figures["ssm_share"] == pytest.approx(0.4)
    assert figures["dram_pct_of_peak"] == pytest.approx(40.0)
    assert figures["ssm_arithmetic_intensity"] == pytest.approx((4e9 + 2 * 2e8) / 8e8)
    assert figures["ssm_block_lifetime_us"] == pytest.approx(100.0)  # 200 us per launch over 2 waves
    assert figures["ssm_tensor_kernels_vector_bound_share"] == 1.0  # FMA 30% against tensor 10%
    out = tmp_path / "report"
    write_report("mamba2-tiny", [side, {**side, "framework": "jax"}], out, "cmd", [], CEILINGS)
    report = (out / "report.md").read_text()
    assert "| SSM arithmetic intensity (FLOP/DRAM byte) | 5.50 | 5.50 |" in report
    assert "| `_chunk_scan_fwd_kernel` | SSM | 400.0 | 2 | 200.0 | 2000 |" in report
    assert "Chosen but not reported by ncu: `nvjet_tst_128x64`" in report
    assert "Counted step's config overrides: `--n_layer=1`" in report
    for png in ("breakdown.png", "roofline.png", "bandwidth.png"):
        data = (out / png).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000
