"""mamba-ssm's ops on numpy inputs in jax_mamba's channels-last layouts, with their input gradients.

Each ``run_*`` takes float32 numpy arrays (already rounded by the caller) and the dtype each is to have in torch
(``dtypes``: activations in the compute dtype, A, D and biases in float32 as mamba-ssm's modules hold them), runs
the op, backpropagates the given output cotangent and returns ``(outputs, grads)`` as float32 numpy in the same
layouts. Which implementation runs (CUDA/Triton or the
torch references) is the loaded ``Reference``'s choice; ``run_ssd`` can ask for ``ssd_minimal_discrete``.
"""

import numpy as np
import torch
import torch.nn.functional as F

from torch_reference._tensors import to_numpy, to_torch, vjp
from torch_reference.backend import Reference


def _leaves(arrays: dict[str, np.ndarray | None], dtypes: dict[str, str], device: str) -> dict[str, torch.Tensor]:
    return {k: to_torch(v, dtypes[k], device, grad=True) for k, v in arrays.items() if v is not None}


def run_selective_scan(ref: Reference, arrays: dict, dtypes: dict, cotangent: np.ndarray, *, delta_softplus: bool):
    """u, delta, z (batch, L, dim); B, C (batch, L, G, N); A (dim, N); D, delta_bias (dim,) -> out (batch, L, dim)."""
    device = ref.device
    t = _leaves(arrays, dtypes, device)
    cf = lambda x: None if x is None else x.transpose(1, 2)  # noqa: E731  (batch, L, dim) -> (batch, dim, L)
    bc = lambda x: x.permute(0, 2, 3, 1)  # noqa: E731  (batch, L, G, N) -> (batch, G, N, L)
    out = ref.selective_scan_fn(
        cf(t["u"]),
        cf(t["delta"]),
        t["A"],
        bc(t["B"]),
        bc(t["C"]),
        t.get("D"),
        cf(t.get("z")),
        t.get("delta_bias"),
        delta_softplus,
    )
    out = out.transpose(1, 2)
    return (to_numpy(out),), vjp((out,), (cotangent,), t)


def run_ssd(
    ref: Reference,
    arrays: dict,
    dtypes: dict,
    cotangent: np.ndarray,
    *,
    chunk_size: int,
    dt_softplus: bool,
    minimal: bool = False,
):
    """x, z (batch, L, H, P); dt (batch, L, H); A (H,); B, C (batch, L, G, N); D (H,) or (H, P); dt_bias (H,).

    ``minimal``: mamba-ssm's ``ssd_minimal_discrete`` oracle (no D/z/dt_bias/softplus; L a multiple of chunk_size)."""
    device = ref.device
    t = _leaves(arrays, dtypes, device)
    if minimal:
        heads, groups = t["x"].shape[2], t["B"].shape[2]
        per_head = lambda m: m.repeat_interleave(heads // groups, dim=2)  # noqa: E731
        dt = t["dt"].float()
        y, _ = ref.ssd_minimal_discrete(
            (t["x"].float() * dt[..., None]),
            t["A"] * dt,
            per_head(t["B"].float()),
            per_head(t["C"].float()),
            chunk_size,
        )
        out = y.to(t["x"].dtype)
    else:  # the Triton kernels on a GPU, mamba-ssm's chunked torch reference on the CPU (same signature)
        scan = ref.mamba_chunk_scan_combined or ref.ssd_chunk_scan_combined_ref
        out = scan(
            t["x"],
            t["dt"],
            t["A"],
            t["B"],
            t["C"],
            chunk_size,
            D=t.get("D"),
            z=t.get("z"),
            dt_bias=t.get("dt_bias"),
            dt_softplus=dt_softplus,
        )
    return (to_numpy(out),), vjp((out,), (cotangent,), t)


def ssd_varlen_states(
    ref: Reference, arrays: dict, dtypes: dict, seq_idx: np.ndarray, cu_seqlens: np.ndarray, *, chunk_size: int
) -> np.ndarray:
    """mamba-ssm's ``mamba_chunk_scan_combined(..., seq_idx, cu_seqlens, return_varlen_states=True)`` on packed
    sequences (batch 1, dt_softplus): its varlen states (num_sequences, H, P, N) as float32 numpy. GPU only (the
    Triton kernels; mamba-ssm's CPU reference has no varlen states)."""
    if ref.mamba_chunk_scan_combined is None:
        raise RuntimeError("varlen states need mamba-ssm's Triton kernels (a GPU)")
    t = _leaves(arrays, dtypes, ref.device)
    index = lambda a: torch.as_tensor(a, dtype=torch.int32, device=ref.device)  # noqa: E731
    with torch.no_grad():
        _, states = ref.mamba_chunk_scan_combined(
            t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size, D=t.get("D"), z=t.get("z"),
            dt_bias=t.get("dt_bias"), seq_idx=index(seq_idx), cu_seqlens=index(cu_seqlens), dt_softplus=True,
            return_varlen_states=True,
        )  # fmt: skip
    return to_numpy(states)


def run_causal_conv1d(ref: Reference, arrays: dict, dtypes: dict, cotangent: np.ndarray, *, activation: str | None):
    """x (batch, L, dim); weight (dim, width); bias (dim,) -> out (batch, L, dim).

    On the GPU: causal-conv1d's CUDA kernel; on the CPU: the nn.Conv1d formulation mamba-ssm's modules fall back to."""
    t = _leaves(arrays, dtypes, ref.device)
    x = t["x"].transpose(1, 2)
    if ref.causal_conv1d_fn is not None:
        out = ref.causal_conv1d_fn(x, t["weight"], t.get("bias"), activation=activation)
    else:  # float32 compute, as nn.Conv1d runs in mamba-ssm's fp32 modules
        width = t["weight"].shape[1]
        bias = None if t.get("bias") is None else t["bias"].float()
        out = F.conv1d(x.float(), t["weight"][:, None, :].float(), bias, padding=width - 1, groups=x.shape[1])
        out = out[..., : x.shape[2]]
        out = (F.silu(out) if activation in ("silu", "swish") else out).to(x.dtype)
    out = out.transpose(1, 2)
    return (to_numpy(out),), vjp((out,), (cotangent,), t)


def run_rmsnorm_gated(
    ref: Reference,
    arrays: dict,
    dtypes: dict,
    cotangent: np.ndarray,
    *,
    eps: float,
    group_size: int | None,
    norm_before_gate: bool,
):
    """x, z (..., dim); weight (dim,) -> out (..., dim): mamba-ssm's gated RMSNorm (Triton; rms_norm_ref on CPU)."""
    t = _leaves(arrays, dtypes, ref.device)
    out = ref.rmsnorm_fn(
        t["x"],
        t["weight"],
        t.get("bias"),
        z=t.get("z"),
        eps=eps,
        group_size=group_size,
        norm_before_gate=norm_before_gate,
    )
    return (to_numpy(out),), vjp((out,), (cotangent,), t)
