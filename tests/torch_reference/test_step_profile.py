"""torch_reference.step_profile on the reference's CPU fallback: the profiled run (no CUDA kernels there, but every
pass range is recorded and the trimmed trace is written)."""

import json

import pytest

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")

from torch_reference.step_profile import profile
from torch_reference.trace_passes import PASS_RANGE


def test_profile_runs_on_the_cpu_fallback(tmp_path):
    trace = tmp_path / "trace.json"
    result = profile("mamba1-tiny", ["--batch_size=2", "--seq_len=16"], steps=2, warmup=1, device="cpu", trace=trace)
    assert result["framework"] == "torch" and result["steps_profiled"] == 2 and result["step_wall_ms"] > 0
    assert result["mode"] == "eager" and "eager (no CUDA graphs" in result["settings"]
    assert result["passes_us"] == {} and result["launches"] == {}  # the CPU fallback launches no CUDA kernels
    names = [e["name"] for e in json.loads(trace.read_text())["traceEvents"]]
    assert sorted(names) == sorted([PASS_RANGE + p for p in ("forward", "backward", "optimizer")] * 2)
