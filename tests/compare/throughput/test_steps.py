"""The throughput driver end to end on tiny configs of two families, training and inference (the real numbers come
from a GPU run, see benchmarks/)."""

import json

import pytest

from compare.throughput.steps import main


def test_train_throughput_writes_json_and_markdown(tmp_path):
    out = tmp_path / "tp"
    argv = ["--configs", "mamba2-tiny", "mambavision-tiny", "--steps", "3", "--batch_size", "2", "--seq_len", "32"]
    # 64 shape images instead of 3000, drawn in both of the vision config's processes (the LM's data ignores it)
    assert main([*argv, "--inference", "--num_images=64", "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    lm, vision = data["runs"]
    assert lm["returncode"] == 0 and lm["unit"] == "tokens" and lm["items_per_s"] > 0 and lm["traces"] == 1
    assert vision["returncode"] == 0 and vision["unit"] == "images" and vision["items_per_s"] > 0
    for run in (lm, vision):
        assert run["inference"]["returncode"] == 0 and run["inference"]["items_per_s"] > 0
        assert run["inference"]["unit"] == run["unit"]
    report = out.with_suffix(".md").read_text()
    assert "| mamba2-tiny |" in report and "| mambavision-tiny |" in report and "Inference" in report


def test_report_rates_against_the_fastest_pytorch_mode_and_says_why_a_mode_failed(tmp_path):
    """Ratios against the fastest mode that ran (named), the eager figure and ratio beside them, every mode listed
    with its rate or its one-line cause; a config whose every mode failed says so."""
    from compare.throughput.steps import best_mode, one_line_cause, write_report

    def ran(rate, peak=1.0):
        return {"returncode": 0, "items_per_s": rate, "peak_memory_gib": peak, "settings": "bf16 autocast"}

    cause = one_line_cause(
        "Traceback (most recent call last):\n  ...\nRuntimeError: operation not permitted when stream is capturing\n"
    )
    failed = {"returncode": 1, "cause": cause}
    modes = {"eager": ran(100.0), "cuda_graph": ran(250.0, 2.0), "compile": failed, "compile_cuda_graph": ran(200.0)}
    assert best_mode(modes) == "cuda_graph" and best_mode({"eager": failed}) is None
    assert cause == "RuntimeError: operation not permitted when stream is capturing"
    ours = {"returncode": 0, "parameters": 1.3e8, "compute_dtype": "bfloat16", "unit": "tokens", "final_loss": 2.5}
    rows = [
        {**ours, "config": "mamba2-130m", "items_per_s": 500.0, "peak_memory_gib": 3.0,
         "torch": {"modes": modes, "best": "cuda_graph"}},
        {**ours, "config": "mamba1-130m", "items_per_s": 300.0, "peak_memory_gib": 3.0,
         "torch": {"modes": {"eager": failed}, "best": None}},
    ]  # fmt: skip
    header = {"device": "H200", "date": "d", "jax": "j", "batch_size": 8, "seq_len": 2048, "steps": 50}
    lines = write_report(tmp_path / "r", {**header, "overrides": [], "command": "c"}, rows)
    mamba2 = next(line for line in lines if line.startswith("| mamba2-130m | 130.0M"))
    assert "| 500 | 3.0 | 250 (cuda_graph) | 2.0 | 2.00x | 100 | 5.00x |" in mamba2
    assert "| mamba1-130m | 130.0M" in "\n".join(lines) and "every mode failed" in "\n".join(lines)
    assert (
        "| mamba2-130m | training | compile | failed (exit 1) |  | RuntimeError: operation not permitted"
        in "\n".join(lines)
    )
    assert "| mamba2-130m | training | compile_cuda_graph | 200 | 1.0 | bf16 autocast |" in lines
    assert (tmp_path / "r.md").read_text().splitlines() == lines


def test_a_process_past_its_time_is_reported_as_failed_with_its_cause():
    import sys

    from compare.throughput.steps import json_line

    result = json_line([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert result["returncode"] == 124 and result["cause"] == "did not finish within 0.5 s"
    done = json_line([sys.executable, "-c", "print('{\"items_per_s\": 3}')"], timeout=30)
    assert done["returncode"] == 0 and done["items_per_s"] == 3


def test_a_run_stopped_mid_way_keeps_what_it_measured_and_says_so(tmp_path, monkeypatch):
    """The JSON and markdown are rewritten after each side's measurement: killed during its second PyTorch mode, a
    run leaves the JAX figure and the first mode on disk, marked unfinished; a whole run leaves no such mark."""
    import compare.throughput.steps as tp

    ours = {"config": "mamba2-130m", "returncode": 0, "items_per_s": 500.0, "peak_memory_gib": 3.0,
            "data_wait_fraction": 0.0, "parameters": 1.3e8, "compute_dtype": "bfloat16", "unit": "tokens",
            "final_loss": 2.5}  # fmt: skip
    monkeypatch.setattr(tp, "run_one", lambda config, *args: {**ours, "config": config})

    def run_torch(config, *sizes, inference=False, mode="eager", timeout=None):
        if mode == "cuda_graph":
            raise KeyboardInterrupt  # as a deadline's kill would stop it, mid-measurement
        return {"returncode": 0, "items_per_s": 100.0, "peak_memory_gib": 2.0, "settings": "eager"}

    monkeypatch.setattr(tp, "run_torch", run_torch)
    out = tmp_path / "cut"
    argv = ["--configs", "mamba2-130m", "--torch", "--torch_modes", "eager", "cuda_graph", "--out", str(out)]
    with pytest.raises(KeyboardInterrupt):
        tp.main(argv)
    saved = json.loads(out.with_suffix(".json").read_text())
    assert saved["measuring"] == "mamba2-130m" and list(saved["runs"][0]["torch"]["modes"]) == ["eager"]
    report = out.with_suffix(".md").read_text()
    assert "**Unfinished**: written while mamba2-130m was being measured" in report
    assert "| 500 | 3.0 | 100 (eager) | 2.0 | 5.00x | 100 | 5.00x |" in report

    whole = tmp_path / "whole"
    assert tp.main(["--configs", "mamba2-130m", "--torch", "--torch_modes", "eager", "--out", str(whole)]) == 0
    assert "measuring" not in json.loads(whole.with_suffix(".json").read_text())
    assert "Unfinished" not in whole.with_suffix(".md").read_text()


def test_inference_only_times_forwards_on_both_sides_and_no_training(tmp_path, monkeypatch):
    """``--inference_only``: no training process on either side, the inference rows rated against the fastest
    PyTorch mode, the training table saying it was not run."""
    import compare.throughput.steps as tp

    def no_training(*args, **kwargs):
        raise AssertionError("--inference_only started a training run")

    forward = {"returncode": 0, "items_per_s": 900.0, "peak_memory_gib": 1.5, "unit": "tokens"}
    monkeypatch.setattr(tp, "run_one", no_training)
    monkeypatch.setattr(tp, "run_jax_inference", lambda config, *sizes: dict(forward))

    def run_torch(config, *sizes, inference=False, mode="eager", timeout=None):
        if not inference:
            no_training()
        rate = {"eager": 300.0, "cuda_graph": 600.0}[mode]
        return {"returncode": 0, "items_per_s": rate, "peak_memory_gib": 2.0, "settings": mode}

    monkeypatch.setattr(tp, "run_torch", run_torch)
    out = tmp_path / "inf"
    argv = ["--configs", "mamba1-130m", "--inference_only", "--torch", "--torch_modes", "eager", "cuda_graph"]
    assert tp.main([*argv, "--out", str(out)]) == 0
    run = json.loads(out.with_suffix(".json").read_text())["runs"][0]
    assert run["training_skipped"] and "torch" not in run and run["torch_inference"]["best"] == "cuda_graph"
    report = out.with_suffix(".md").read_text()
    assert report.startswith("# Inference throughput") and "final loss" not in report
    assert "| mamba1-130m | 900 | 1.5 | 600 (cuda_graph) | 2.0 | 1.50x | 300 | 3.00x |" in report
    assert "| mamba1-130m | inference | cuda_graph | 600 | 2.0 | cuda_graph |" in report
