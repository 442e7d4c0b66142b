"""torch_reference.trace_passes: each GPU kernel of a chrome trace credited to the pass range it ran in on the GPU,
per step, with launch counts; the trimmed trace keeps exactly what that needs."""

import gzip
import json
from pathlib import Path

import pytest

from torch_reference.trace_passes import PASS_RANGE, kernels_by_pass, trimmed


def span(name, ts, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": 7}}


def annotation(phase, ts, dur):
    return span(PASS_RANGE + phase, ts, dur, cat="user_annotation")


def two_steps() -> dict:
    return {
        "traceEvents": [
            annotation("forward", 0, 100),
            annotation("backward", 100, 200),
            annotation("optimizer", 300, 50),
            span("gemm_a", 10, 40),
            # launched by the autograd thread: only its GPU time places it in the backward
            span("cunn_SoftMaxBackward", 101, 30),
            span("gemm_a", 150, 20),
            span("multi_tensor_apply_kernel", 310, 8),
            span("Memcpy DtoH", 400, 2, cat="gpu_memcpy"),
            span("cudaLaunchKernel", 12, 1, cat="cuda_runtime"),  # CPU side: not GPU work
            {"ph": "i", "cat": "kernel", "name": "instant", "ts": 20},  # not a span
            annotation("forward", 500, 100),
            span("gemm_a", 510, 40),
            annotation("backward", 600, 100),
            span("cunn_SoftMaxBackward", 605, 30),
        ]
    }


def test_kernels_go_to_the_pass_they_ran_in():
    passes, launches = kernels_by_pass(two_steps(), steps=2)
    assert passes == {
        "forward": {"gemm_a": 40.0},
        "backward": {"cunn_SoftMaxBackward": 30.0, "gemm_a": 10.0},
        "optimizer": {"multi_tensor_apply_kernel": 4.0},
        "other": {"Memcpy DtoH": 1.0},
    }
    assert launches == pytest.approx(
        {"gemm_a": 1.5, "cunn_SoftMaxBackward": 1.0, "multi_tensor_apply_kernel": 0.5, "Memcpy DtoH": 0.5}
    )


def test_trimmed_trace_keeps_what_the_passes_need():
    trace = two_steps()
    small = trimmed(trace)
    assert {e["cat"] for e in small["traceEvents"]} == {"kernel", "gpu_memcpy", "user_annotation"}
    assert all(set(e) <= {"name", "cat", "ph", "ts", "dur"} for e in small["traceEvents"])
    assert kernels_by_pass(small, steps=2) == kernels_by_pass(trace, steps=2)


def test_recorded_trace_puts_every_kernel_in_its_pass():
    """A real trimmed trace (mamba2-tiny, two steps on an H100; tests/compare/fixtures/README.md): the backward's
    kernels, launched by the autograd thread, all land in the backward (by CPU launch time alone, the softmax backward
    would land in the forward)."""
    trace = json.loads(gzip.decompress((Path(__file__).parent / "fixtures" / "torch-trace-mamba2-tiny.json.gz")
                                       .read_bytes()))  # fmt: skip
    passes, launches = kernels_by_pass(trace, steps=2)
    assert set(passes) == {"forward", "backward", "optimizer", "other"}
    assert all(name.startswith("Memcpy") for name in passes["other"])  # only the loss read back
    assert not [name for name in passes["forward"] if "bwd" in name or "Backward" in name or "backward" in name]
    assert {"_chunk_scan_fwd_kernel", "_chunk_state_fwd_kernel"} <= set(passes["forward"])
    assert {"_chunk_scan_chunk_state_bwd_dx_kernel", "_layer_norm_bwd_kernel"} <= set(passes["backward"])
    assert any("multi_tensor_apply_kernel" in name for name in passes["optimizer"])  # fused AdamW
    assert not [name for name in passes["optimizer"] if name.startswith("_")]  # no Triton (SSD, norm) kernels
    device = [e for e in trace["traceEvents"] if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    assert sum(sum(k.values()) for k in passes.values()) == pytest.approx(sum(e["dur"] for e in device) / 2)
    assert sum(launches.values()) == pytest.approx(len(device) / 2)
