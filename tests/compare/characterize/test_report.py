"""compare.characterize on the CPU: pass assignment, the per-category and per-pass sums of both frameworks' rows
(nothing dropped, the unclassified share reported), the report files, and the JAX path end to end (a CPU trace has
no GPU kernels, so its sums are empty there; the command itself refuses to run without a GPU)."""

import json
import os

import pytest

from compare.characterize import report as characterize
from compare.characterize.kernel_classes import UNCLASSIFIED
from compare.characterize.report import (
    PHASES,
    characterize_jax,
    jax_rows,
    phase_of,
    report_dir,
    summarize,
    torch_rows,
    write_report,
)
from compare.characterize.step_profile import StepProfile


def test_jax_passes_from_scopes_and_pallas_names():
    assert phase_of("loop_add_fusion_1", "jit(step)/jvp(block)/mixer/add") == "forward"
    assert phase_of("input_reduce_fusion_2", "jit(step)/transpose(jvp(block))/norm/reduce_sum") == "backward"
    assert phase_of("loop_add_fusion_3", "jit(step)/optimizer/add") == "optimizer"
    assert phase_of("selective_scan_bwd", "") == "backward" and phase_of("ssd_bwd_dx", "") == "backward"
    assert phase_of("selective_scan_fwd", "") == "forward"


def synthetic_profile() -> StepProfile:
    kernel_us = {
        "nvjet_tst_128x64": 400.0,
        "selective_scan_bwd": 300.0,
        "selective_scan_fwd": 100.0,
        "input_reduce_fusion_5": 50.0,
        "loop_add_fusion_9": 40.0,
        "mystery_kernel": 10.0,
    }
    scopes = {
        "input_reduce_fusion_5": "jit(step)/transpose(jvp(block))/rms_norm/reduce_sum",
        "loop_add_fusion_9": "jit(step)/optimizer/add",
    }
    return StepProfile({(kernel, ""): us for kernel, us in kernel_us.items()}, scopes, step_wall_ms=1.2, steps=4)


def test_summary_sums_every_kernel_by_category_and_pass():
    result = summarize(jax_rows(synthetic_profile()), top=3)
    assert result["device_ms"] == pytest.approx(0.9)
    cats = result["categories_ms"]
    assert cats["GEMM"] == pytest.approx(0.4) and cats["SSM"] == pytest.approx(0.4)
    assert cats["normalization"] == pytest.approx(0.05) and cats["optimizer"] == pytest.approx(0.04)
    assert cats[UNCLASSIFIED] == pytest.approx(0.01) and result["unclassified_share"] == pytest.approx(0.01 / 0.9)
    phases = result["phases_ms"]
    assert phases["backward"]["SSM"] == pytest.approx(0.3) and phases["forward"]["SSM"] == pytest.approx(0.1)
    assert phases["backward"]["normalization"] == pytest.approx(0.05)
    assert phases["optimizer"]["optimizer"] == pytest.approx(0.04)
    for category, ms in cats.items():
        assert sum(phases[p][category] for p in PHASES) == pytest.approx(ms)
    assert [k["kernel"] for k in result["kernels"]] == ["nvjet_tst_128x64", "selective_scan_bwd", "selective_scan_fwd"]


def test_torch_rows_keep_their_passes():
    passes = {
        "forward": {"void selective_scan_fwd_kernel<...>": 80.0, "ampere_bf16_s16816gemm_bf16": 120.0},
        "backward": {"void selective_scan_bwd_kernel<...>": 200.0},
        "optimizer": {"multi_tensor_apply_kernel<FusedAdamMathFunctor>": 30.0},
        "other": {"Memcpy HtoD (Pageable -> Device)": 5.0},
    }
    result = summarize(torch_rows(passes))
    assert result["device_ms"] == pytest.approx(0.435)
    assert result["phases_ms"]["forward"]["SSM"] == pytest.approx(0.08)
    assert result["phases_ms"]["backward"]["SSM"] == pytest.approx(0.2)
    assert result["phases_ms"]["optimizer"]["optimizer"] == pytest.approx(0.03)
    assert result["phases_ms"]["other"]["copy/other"] == pytest.approx(0.005)


def test_report_files(tmp_path):
    side = {"framework": "jax", "version": "jax x", "device": "NVIDIA H100 80GB HBM3", "steps_profiled": 4}
    side |= {"step_wall_ms": 1.2, **summarize(jax_rows(synthetic_profile())), "launches": {"a": 3.0, "b": 1200.0}}
    side["step_wall_ms_as_trained"] = 0.9
    out = report_dir(tmp_path, "mamba1-tiny", side["device"])
    assert out.parent == tmp_path / "mamba1-tiny" and out.name.startswith("nvidia-h100-80gb-hbm3-20")
    write_report("mamba1-tiny", [side, {**side, "framework": "torch"}], out, "python -m compare.characterize", [])
    saved = json.loads((out / "characterization.json").read_text())
    assert [s["framework"] for s in saved["sides"]] == ["jax", "torch"]
    assert saved["sides"][0]["categories_ms"] == side["categories_ms"]
    report = (out / "report.md").read_text()
    assert "| SSM | 0.400 | 44.4% | 0.400 | 44.4% |" in report and f"| {UNCLASSIFIED} |" in report
    assert "| SSM | 0.100 | 0.300 | 0.000 | 0.000 |" in report  # by pass
    jax_line, torch_line = (line for line in report.splitlines() if line.startswith("- "))
    assert "wall 1.20 ms per step (XLA command buffers off: 1,203 kernel launches a step; 0.90 ms as" in jax_line
    assert "command buffers" not in torch_line  # PyTorch's wall is its own execution mode's
    assert "| wall per step as trained (ms; JAX: command buffers on) | 0.90 | 1.20 |" in report
    png = (out / "breakdown.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_the_jax_path_runs_end_to_end_on_the_cpu():
    result = characterize_jax("mamba1-tiny", ["--batch_size=2", "--seq_len=16"], steps=2)
    assert result["steps_profiled"] == 2 and result["step_wall_ms"] > 0 and result["step_wall_ms_as_trained"] > 0
    assert result["device_ms"] == 0.0 and result["unclassified_share"] == 0.0  # a CPU trace has no GPU kernels


def test_a_third_side_runs_the_jax_step_with_mamba_ssm_kernels(cpu_reference, monkeypatch):
    """--with-jax-impl: the same config under model.impl=mamba_ssm_triton, the impl registered before the step is
    built (the kernels need a GPU, so the step itself stops here before training)."""
    from pallas_kernels.ssd import api

    seen = []

    def training(config, overrides, steps):
        seen.append(overrides)
        raise RuntimeError("stop before training")

    monkeypatch.setattr(characterize, "jax_training", training)
    with pytest.raises(RuntimeError, match="stop before training"):
        characterize_jax("mamba2-tiny", ["--batch_size=2"], steps=2, impl="mamba_ssm_triton")
    assert seen == [["--batch_size=2", "--model.impl=mamba_ssm_triton"]]
    assert "mamba_ssm_triton" in api.registered_impls()


@pytest.mark.parametrize(("mode", "side"), [("eager", "torch"), ("cuda_graph", "torch cuda_graph")])
def test_torch_side_runs_in_its_execution_mode(monkeypatch, mode, side):
    """--torch-modes: each mode's step_profile process gets --mode, and its side is named by the mode (eager keeps
    the plain "torch", which the counters and summaries key on)."""
    commands = []

    def fake(command):
        commands.append(command)
        return {"returncode": 0, "torch": "2", "reference": "r", "settings": "s", "device": "GPU", "steps_profiled": 2,
                "step_wall_ms": 1.0, "launches": {}, "passes_us": {"other": {"gemm_kernel": 5.0}}}  # fmt: skip

    monkeypatch.setattr(characterize, "json_line", fake)
    result = characterize.characterize_torch("mamba2-tiny", ["--batch_size=2"], steps=2, mode=mode)
    assert f"--mode={mode}" in commands[0] and commands[0][-1] == "--batch_size=2"
    assert result["framework"] == side and result["mode"] == mode and result["device_ms"] > 0


def test_command_refuses_without_a_gpu_and_bad_steps(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # the command turns command buffers off
    with pytest.raises(SystemExit, match="JAX sees no GPU"):
        characterize.main(["--config", "mamba1-tiny"])
    with pytest.raises(SystemExit, match="--steps: expected a positive integer"):
        characterize.main(["--config", "mamba1-tiny", "--steps", "0"])
    with pytest.raises(SystemExit, match="--ncu-override: expected KEY=VALUE"):
        characterize.main(["--config", "mamba1-tiny", "--ncu", "--ncu-override", "n_layer"])


def test_jax_rows_credit_a_shared_gemm_kernel_to_each_launching_instructions_pass():
    """cuBLAS names forward and backward GEMMs alike; with the launching instruction from the trace, each launch
    gets its instruction's scope and pass, and the per-kernel totals are unchanged."""
    launches = {
        ("nvjet_tst_128x64", "custom-call_3"): 300.0,
        ("nvjet_tst_128x64", "custom-call_9"): 500.0,
        ("ssd_bwd_dx", "custom-call_11"): 120.0,  # one layer's launch
        ("ssd_bwd_dx", "custom-call_12"): 80.0,  # the next layer's
    }
    scopes = {
        "custom-call_3": "jit(step)/jvp(block)/in_proj/dot_general",
        "custom-call_9": "jit(step)/transpose(jvp(block))/in_proj/dot_general",
    }
    profile = StepProfile(launches, scopes, 1.0, 2)
    assert profile.kernel_us == {"nvjet_tst_128x64": 800.0, "ssd_bwd_dx": 200.0}
    summary = summarize(jax_rows(profile))
    rows = [(k["kernel"], k["phase"], k["us"]) for k in summary["kernels"]]
    assert rows == [("nvjet_tst_128x64", "backward", 500.0), ("nvjet_tst_128x64", "forward", 300.0),
                    ("ssd_bwd_dx", "backward", 200.0)]  # fmt: skip
    phases = summary["phases_ms"]
    assert phases["forward"]["GEMM"] == pytest.approx(0.3) and phases["backward"]["GEMM"] == pytest.approx(0.5)
    assert phases["backward"]["SSM"] == pytest.approx(0.2)
