"""torch_reference.ssd_jax_triton on the CPU: every launch it makes (kernel, scalar arguments, strides, array
shapes, compile-time constants) equals what mamba-ssm's own PyTorch forward passes the same kernel for the same
inputs, recorded without running either (jax-triton needs a GPU). The one expected difference: the chunk-end
decay, a strided view in PyTorch and a contiguous slice in JAX, has its own strides."""

import contextlib

import numpy as np
import pytest

from tests.torch_reference.jax_triton_recorder import record_jax_launches

KERNELS = [
    ("ssd_chunk_state", "_chunk_cumsum_fwd_kernel"),
    ("ssd_chunk_state", "_chunk_state_fwd_kernel"),
    ("ssd_state_passing", "_state_passing_fwd_kernel"),
    ("ssd_bmm", "_bmm_chunk_fwd_kernel"),
    ("ssd_chunk_scan", "_chunk_scan_fwd_kernel"),
]
DECAY_STRIDES = {"stride_dA_cs_batch", "stride_dA_cs_chunk", "stride_dA_cs_head"}


def record_torch(monkeypatch, inputs: dict, chunk: int) -> list[tuple[str, dict]]:
    import importlib

    import torch
    from mamba_ssm.ops.triton.ssd_combined import _mamba_chunk_scan_combined_fwd

    calls = []

    class Recorder:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                calls.append(
                    (self.kernel.fn.__name__, {**dict(zip(self.kernel.fn.arg_names, args, strict=False)), **kwargs})
                )

            return launch

    for module, name in KERNELS:
        mod = importlib.import_module(f"mamba_ssm.ops.triton.{module}")
        monkeypatch.setattr(mod, name, Recorder(getattr(mod, name)))
    monkeypatch.setattr(torch.cuda, "device", lambda *_: contextlib.nullcontext())
    t = {k: None if v is None else torch.from_numpy(v) for k, v in inputs.items()}
    _mamba_chunk_scan_combined_fwd(
        t["x"], t["dt"], t["A"], t["B"], t["C"], chunk, D=t["D"], z=t["z"], dt_bias=t["dt_bias"],
        initial_states=t["initial_states"], seq_idx=t["seq_idx"], dt_softplus=True,
    )  # fmt: skip
    monkeypatch.undo()
    return calls


def record_jax(monkeypatch, inputs: dict, chunk: int) -> list[tuple[str, dict]]:
    import jax.numpy as jnp

    arrays = {k: None if v is None else jnp.asarray(v) for k, v in inputs.items()}
    return [(launch.name, launch.by_name()) for launch in record_jax_launches(monkeypatch, arrays, chunk)]


def described(value):
    """An argument as comparable data: an array by shape, a Triton dtype by name, None as a 1-element placeholder."""
    if value is None:
        return ("array", (1,))
    if hasattr(value, "shape") and not isinstance(value, (int, float)):
        return ("array", tuple(value.shape))
    return str(value) if type(value).__module__.startswith("triton") else value


@pytest.mark.parametrize(
    "dims",
    [(1, 1, 4, 16, 1, 16, 64), (2, 100, 4, 32, 2, 32, 32), (3, 77, 6, 64, 3, 128, 256)],
    ids=lambda d: "b{}L{}H{}P{}G{}N{}c{}".format(*d),
)
@pytest.mark.parametrize("options", ["plain", "everything"])
def test_launches_match_mamba_ssm_own_forward(cpu_reference, monkeypatch, rng, dims, options):
    batch, seqlen, nheads, headdim, ngroups, dstate, chunk = dims
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    full = options == "everything"
    inputs = {
        "x": f(batch, seqlen, nheads, headdim), "dt": f(batch, seqlen, nheads), "A": -np.abs(f(nheads)),
        "B": f(batch, seqlen, ngroups, dstate), "C": f(batch, seqlen, ngroups, dstate),
        "D": f(nheads, headdim) if full else None, "z": f(batch, seqlen, nheads, headdim) if full else None,
        "dt_bias": f(nheads) if full else None,
        "initial_states": f(batch, nheads, headdim, dstate) if full else None,
        "seq_idx": np.sort(rng.integers(0, 3, (batch, seqlen)), axis=1).astype(np.int32) if full else None,
    }  # fmt: skip
    theirs = record_torch(monkeypatch, inputs, chunk)
    ours = record_jax(monkeypatch, inputs, chunk)
    assert [name for name, _ in theirs] == [name for _, name in KERNELS]
    assert [name for name, _ in ours] == [f"mamba_ssm_{n[1:].removesuffix('_kernel')}" for _, n in KERNELS]
    for (kernel, expected), (_, got) in zip(theirs, ours, strict=True):
        for param, value in expected.items():
            if param in DECAY_STRIDES:
                continue
            assert param in got, f"{kernel}: {param} not passed"
            assert described(got[param]) == described(value), f"{kernel}: {param}"
