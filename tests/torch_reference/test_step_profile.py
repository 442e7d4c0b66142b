"""torch_reference.step_profile: kernels credited to the pass range in which the CPU launched them, and the
profiled run on the reference's CPU fallback (no CUDA kernels there, but every pass range is recorded)."""

from types import SimpleNamespace

import pytest

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")

from torch_reference.step_profile import kernels_by_pass, profile
from torch_reference.train_bench import PASS_RANGE


def event(name, start, end, kernels=()):
    kernels = [SimpleNamespace(name=k, device=0, duration=d) for k, d in kernels]
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), kernels=kernels)


def test_kernels_go_to_the_pass_that_launched_them():
    events = [
        event(PASS_RANGE + "forward", 0, 100),
        event(PASS_RANGE + "backward", 100, 300),
        event(PASS_RANGE + "optimizer", 300, 350),
        event("cudaLaunchKernel", 10, 11, [("gemm_a", 40.0)]),
        event("cudaLaunchKernel", 150, 151, [("scan_bwd", 60.0), ("gemm_a", 20.0)]),
        event("cudaLaunchKernel", 310, 311, [("multi_tensor_apply_kernel", 8.0)]),
        event("cudaMemcpyAsync", 400, 401, [("Memcpy DtoH", 2.0)]),
        event(PASS_RANGE + "forward", 500, 600),  # a second step
        event("cudaLaunchKernel", 510, 511, [("gemm_a", 40.0)]),
    ]
    assert kernels_by_pass(events, steps=2) == {
        "forward": {"gemm_a": 40.0},
        "backward": {"scan_bwd": 30.0, "gemm_a": 10.0},
        "optimizer": {"multi_tensor_apply_kernel": 4.0},
        "other": {"Memcpy DtoH": 1.0},
    }


def test_profile_runs_on_the_cpu_fallback():
    result = profile("mamba1-tiny", ["--batch_size=2", "--seq_len=16"], steps=2, warmup=1, device="cpu")
    assert result["framework"] == "torch" and result["steps_profiled"] == 2 and result["step_wall_ms"] > 0
    assert result["passes_us"] == {}  # the CPU fallback launches no CUDA kernels
