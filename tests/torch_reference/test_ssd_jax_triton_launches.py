"""torch_reference.ssd_jax_triton on the CPU: every launch its forward and backward make (kernel, scalar arguments,
strides, array shapes, compile-time constants) equals what mamba-ssm's own PyTorch forward and backward pass the same
kernel for the same inputs, recorded without running either (jax-triton needs a GPU); the outputs jax-triton zeroes
are those mamba-ssm's pre-hooks zero plus the partial-tile buffers summed whole. The one expected difference: the
chunk-end decay, a strided view in PyTorch and a contiguous slice in JAX, has its own strides."""

import contextlib
import types

import numpy as np
import pytest

from tests.torch_reference.jax_triton_recorder import H100_SMS, record_jax_backward_launches, record_jax_launches

KERNELS = [
    ("ssd_chunk_state", "_chunk_cumsum_fwd_kernel"),
    ("ssd_chunk_state", "_chunk_state_fwd_kernel"),
    ("ssd_state_passing", "_state_passing_fwd_kernel"),
    ("ssd_bmm", "_bmm_chunk_fwd_kernel"),
    ("ssd_chunk_scan", "_chunk_scan_fwd_kernel"),
]
BACKWARD_KERNELS = [  # mamba-ssm's backward, in launch order (the dz kernel only with z)
    ("ssd_chunk_state", "_chunk_cumsum_fwd_kernel"),
    ("ssd_bmm", "_bmm_chunk_fwd_kernel"),
    ("ssd_chunk_state", "_chunk_state_fwd_kernel"),
    ("ssd_state_passing", "_state_passing_fwd_kernel"),
    ("ssd_chunk_scan", "_chunk_scan_bwd_dz_kernel"),
    ("ssd_chunk_scan", "_chunk_scan_bwd_dstates_kernel"),
    ("ssd_state_passing", "_state_passing_bwd_kernel"),
    ("ssd_combined", "_chunk_scan_chunk_state_bwd_dx_kernel"),
    ("ssd_chunk_state", "_chunk_state_bwd_db_kernel"),
    ("ssd_chunk_scan", "_chunk_scan_bwd_dc_kernel"),
    ("ssd_chunk_scan", "_chunk_scan_bwd_dcb_kernel"),
    ("ssd_bmm", "_bmm_chunk_bwd_kernel"),
    ("ssd_bmm", "_bmm_chunk_bwd_kernel"),
    ("ssd_chunk_scan", "_chunk_scan_bwd_ddAcs_stable_kernel"),
    ("ssd_chunk_state", "_chunk_cumsum_bwd_kernel"),
]
ZEROED = {  # kernel -> outputs that start as zeros: mamba-ssm's init_to_zero pre-hooks, + partial tiles summed whole
    "_chunk_scan_bwd_dz_kernel": {"dD_ptr"},
    "_state_passing_bwd_kernel": {"ddA_cs_ptr"},
    "_chunk_scan_chunk_state_bwd_dx_kernel": {"ddt_ptr", "dD_ptr"},
    "_chunk_state_bwd_db_kernel": {"ddA_cumsum_ptr"},
    "_chunk_scan_bwd_dc_kernel": {"ddA_cumsum_ptr"},
    "_chunk_scan_bwd_ddAcs_stable_kernel": {"ddA_cumsum_ptr"},
    "_chunk_cumsum_bwd_kernel": {"dA_ptr", "ddt_bias_ptr"},
}
DECAY_STRIDES = {"stride_dA_cs_batch", "stride_dA_cs_chunk", "stride_dA_cs_head"}
DECAY_KERNELS = {"_state_passing_fwd_kernel", "_state_passing_bwd_kernel"}


def record_torch(monkeypatch, kernels: list, run) -> list[tuple[str, dict]]:
    """mamba-ssm's launches of ``kernels`` while ``run()`` runs its host code, without running a kernel (the
    partial-tile sums read the first config back as if it had been chosen)."""
    import importlib

    import torch

    calls = []

    class Recorder:
        def __init__(self, kernel):
            self.kernel = kernel
            self.configs = kernel.configs
            self.best_config = kernel.configs[0]

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                calls.append(
                    (self.kernel.fn.__name__, {**dict(zip(self.kernel.fn.arg_names, args, strict=False)), **kwargs})
                )

            return launch

    for module, name in dict.fromkeys(kernels):
        mod = importlib.import_module(f"mamba_ssm.ops.triton.{module}")
        monkeypatch.setattr(mod, name, Recorder(getattr(mod, name)))
    monkeypatch.setattr(torch.cuda, "device", lambda *_: contextlib.nullcontext())
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda *_: types.SimpleNamespace(multi_processor_count=H100_SMS)
    )
    run()
    monkeypatch.undo()
    return calls


def record_torch_forward(monkeypatch, inputs: dict, chunk: int) -> list[tuple[str, dict]]:
    import torch
    from mamba_ssm.ops.triton.ssd_combined import _mamba_chunk_scan_combined_fwd

    t = {k: None if v is None else torch.from_numpy(v) for k, v in inputs.items()}
    return record_torch(
        monkeypatch,
        KERNELS,
        lambda: _mamba_chunk_scan_combined_fwd(
            t["x"], t["dt"], t["A"], t["B"], t["C"], chunk, D=t["D"], z=t["z"], dt_bias=t["dt_bias"],
            initial_states=t["initial_states"], seq_idx=t["seq_idx"], dt_softplus=True,
        ),
    )  # fmt: skip


def record_torch_backward(monkeypatch, inputs: dict, chunk: int) -> list[tuple[str, dict]]:
    import torch
    from mamba_ssm.ops.triton.ssd_combined import _mamba_chunk_scan_combined_bwd

    t = {k: None if v is None else torch.from_numpy(v) for k, v in inputs.items()}
    return record_torch(
        monkeypatch,
        BACKWARD_KERNELS,
        lambda: _mamba_chunk_scan_combined_bwd(
            t["dout"], t["x"], t["dt"], t["A"], t["B"], t["C"], t["x"], chunk, D=t["D"], z=t["z"],
            dt_bias=t["dt_bias"], initial_states=t["initial_states"], dfinal_states=t["dfinal_states"],
            seq_idx=t["seq_idx"], dt_softplus=True,
        ),
    )  # fmt: skip


def as_jax(inputs: dict) -> dict:
    import jax.numpy as jnp

    return {k: None if v is None else jnp.asarray(v) for k, v in inputs.items()}


def described(value):
    """An argument as comparable data: an array by shape, a Triton dtype by name, None as a 1-element placeholder."""
    if value is None:
        return ("array", (1,))
    if hasattr(value, "shape") and not isinstance(value, (int, float)):
        return ("array", tuple(value.shape))
    return str(value) if type(value).__module__.startswith("triton") else value


def make_inputs(rng, dims, options: str) -> dict:
    batch, seqlen, nheads, headdim, ngroups, dstate, _ = dims
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    full = options == "everything"
    return {
        "x": f(batch, seqlen, nheads, headdim), "dt": f(batch, seqlen, nheads), "A": -np.abs(f(nheads)),
        "B": f(batch, seqlen, ngroups, dstate), "C": f(batch, seqlen, ngroups, dstate),
        "D": f(nheads, headdim) if full else None, "z": f(batch, seqlen, nheads, headdim) if full else None,
        "dt_bias": f(nheads) if full else None,
        "initial_states": f(batch, nheads, headdim, dstate) if full else None,
        "seq_idx": np.sort(rng.integers(0, 3, (batch, seqlen)), axis=1).astype(np.int32) if full else None,
        "dout": f(batch, seqlen, nheads, headdim),
        "dfinal_states": f(batch, nheads, headdim, dstate) if full else None,
    }  # fmt: skip


def assert_same_launches(theirs: list, ours: list) -> None:
    assert [f"mamba_ssm_{name[1:].removesuffix('_kernel')}" for name, _ in theirs] == [launch.name for launch in ours]
    for (kernel, expected), launch in zip(theirs, ours, strict=True):
        got = launch.by_name()
        for param, value in expected.items():
            if param in DECAY_STRIDES and kernel in DECAY_KERNELS:
                continue
            assert param in got, f"{kernel}: {param} not passed"
            assert described(got[param]) == described(value), f"{kernel}: {param}"
        assert set(launch.zeroed) == {n for n in ZEROED.get(kernel, ()) if n in got and not is_placeholder(got[n])}


def is_placeholder(value) -> bool:
    return hasattr(value, "shape") and tuple(value.shape) == (1,)


DIMS = [(1, 1, 4, 16, 1, 16, 64), (2, 100, 4, 32, 2, 32, 32), (3, 77, 6, 64, 3, 128, 256)]


@pytest.mark.parametrize("dims", DIMS, ids=lambda d: "b{}L{}H{}P{}G{}N{}c{}".format(*d))
@pytest.mark.parametrize("options", ["plain", "everything"])
def test_launches_match_mamba_ssm_own_forward(cpu_reference, monkeypatch, rng, dims, options):
    inputs = make_inputs(rng, dims, options)
    theirs = record_torch_forward(monkeypatch, inputs, dims[-1])
    ours = record_jax_launches(monkeypatch, as_jax(inputs), dims[-1])
    assert [name for name, _ in theirs] == [name for _, name in KERNELS]
    assert_same_launches(theirs, ours)


@pytest.mark.parametrize("dims", [*DIMS, (2, 300, 16, 64, 2, 64, 64)], ids=lambda d: "b{}L{}H{}P{}G{}N{}c{}".format(*d))
@pytest.mark.parametrize("options", ["plain", "everything"])
def test_launches_match_mamba_ssm_own_backward(cpu_reference, monkeypatch, rng, dims, options):
    """Several heads per program in the dB/dC/d(C·Bᵀ) splits at the last shape (16 heads, 2 groups, 132 SMs)."""
    inputs = make_inputs(rng, dims, options)
    theirs = record_torch_backward(monkeypatch, inputs, dims[-1])
    ours = record_jax_backward_launches(monkeypatch, as_jax(inputs), dims[-1])
    expected = [name for _, name in BACKWARD_KERNELS if options == "everything" or "_dz_" not in name]
    assert [name for name, _ in theirs] == expected
    assert_same_launches(theirs, ours)
