"""mamba-ssm's kernels as zero-argument callables for the kernel benchmarks (``compare.kernels`` times them).

Inputs arrive as float32 numpy in jax_mamba's channels-last layouts and are laid out the way mamba-ssm's modules
feed its kernels (channels first), so each side is timed in its native layout.
"""

import dataclasses
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from torch_reference._tensors import to_numpy, to_torch
from torch_reference.backend import Reference
from torch_reference.trace_passes import kernels_by_pass


@dataclasses.dataclass
class KernelCalls:
    forward: Callable[[], object]  # runs the forward
    forward_backward: Callable[[], object] | None  # the forward and the fixed cotangent's backward; None: no backward
    sync: Callable[[object], None]  # sync(output): waits until the device has finished
    output: np.ndarray  # the forward's output, channels-last float32
    saved_bytes: int  # what autograd keeps for the backward beyond the inputs
    steps_per_call: int = 1  # a decoding step's calls: the steps one ``forward()`` runs (its time is divided by it)


def saved_beyond_inputs(run: Callable[[], object], inputs: list[torch.Tensor]) -> int:
    """Bytes of the tensors autograd saves for the backward during ``run()`` that are not one of ``inputs``
    (the same storage): what the forward keeps alive until its backward, counted through autograd's hooks."""
    pointers = {t.data_ptr() for t in inputs}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in pointers:
            seen[t.data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    del out
    return sum(seen.values())


def _calls(run: Callable[[], torch.Tensor], leaves: list, dout, device: str, channels_first: bool) -> KernelCalls:
    """The timed callables of ``run()`` (a kernel on ``leaves``): its forward without an autograd graph (inference:
    nothing saved for a backward), forward+backward of the fixed cotangent ``dout``, its output channels-last."""

    def forward():
        with torch.no_grad():
            return run()

    def forward_backward():
        return torch.autograd.grad(run(), leaves, dout)

    output = to_numpy(forward())
    output = output.transpose(0, 2, 1) if channels_first else output
    sync = _sync_cuda if device == "cuda" else _no_sync
    return KernelCalls(forward, forward_backward, sync, output, saved_beyond_inputs(run, leaves))


def selective_scan_calls(
    ref: Reference, arrays: dict, dtypes: dict, cotangent: np.ndarray, *, delta_softplus: bool
) -> KernelCalls:
    """u, delta, z (batch, L, dim); B, C (batch, L, G, N); A (dim, N); D, delta_bias (dim,): mamba-ssm's
    ``selective_scan_fn`` on (batch, dim, L) and (batch, G, N, L) copies of them."""
    device = ref.device

    def leaf(name, permute=None):
        value = arrays.get(name)
        if value is None:
            return None
        if permute is not None:
            value = np.ascontiguousarray(np.transpose(value, permute))
        return to_torch(value, dtypes[name], device, grad=True)

    cf, bc = (0, 2, 1), (0, 2, 3, 1)
    args = [leaf("u", cf), leaf("delta", cf), leaf("A"), leaf("B", bc), leaf("C", bc), leaf("D"), leaf("z", cf)]
    args.append(leaf("delta_bias"))
    leaves = [a for a in args if a is not None]
    dout = to_torch(np.ascontiguousarray(np.transpose(cotangent, cf)), dtypes["u"], device)

    def run():
        return ref.selective_scan_fn(*args, delta_softplus=delta_softplus)

    return _calls(run, leaves, dout, device, channels_first=True)


def ssd_calls(ref: Reference, arrays: dict, dtypes: dict, cotangent: np.ndarray, *, chunk_size: int) -> KernelCalls:
    """x, z (batch, L, H, P); dt (batch, L, H); A, D, dt_bias (H,); B, C (batch, L, G, N), float32 numpy:
    mamba-ssm's ``mamba_chunk_scan_combined`` (Triton on a GPU, its torch reference on the CPU) with
    dt_softplus, in the same layout (no copies)."""
    device = ref.device
    scan = ref.mamba_chunk_scan_combined or ref.ssd_chunk_scan_combined_ref
    names = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")
    leaves = {k: to_torch(arrays[k], dtypes[k], device, grad=True) for k in names}
    dout = to_torch(cotangent, dtypes["x"], device)

    def run():
        kw = {k: leaves[k] for k in ("D", "z", "dt_bias")}
        return scan(*(leaves[k] for k in ("x", "dt", "A", "B", "C")), chunk_size, **kw, dt_softplus=True)

    return _calls(run, list(leaves.values()), dout, device, channels_first=False)


def causal_conv1d_calls(ref: Reference, arrays: dict, dtypes: dict, cotangent: np.ndarray) -> KernelCalls:
    """x (batch, L, dim), weight (dim, width), bias (dim,): causal-conv1d's ``causal_conv1d_fn`` with SiLU on a
    (batch, dim, L) copy of x, as mamba-ssm's Mamba block calls it."""
    device = ref.device
    if ref.causal_conv1d_fn is None:
        raise RuntimeError("causal-conv1d's CUDA extension is not built: python -m torch_reference.build")
    x = to_torch(np.ascontiguousarray(np.transpose(arrays["x"], (0, 2, 1))), dtypes["x"], device, grad=True)
    weight = to_torch(arrays["weight"], dtypes["weight"], device, grad=True)
    bias = to_torch(arrays["bias"], dtypes["bias"], device, grad=True)
    dout = to_torch(np.ascontiguousarray(np.transpose(cotangent, (0, 2, 1))), dtypes["x"], device)

    def run():
        return ref.causal_conv1d_fn(x, weight, bias, activation="silu")

    return _calls(run, [x, weight, bias], dout, device, channels_first=True)


def rmsnorm_gated_calls(
    ref: Reference,
    arrays: dict,
    dtypes: dict,
    cotangent: np.ndarray,
    *,
    eps: float,
    group_size: int,
    norm_before_gate: bool,
) -> KernelCalls:
    """x, z (rows, dim), weight (dim,): mamba-ssm's gated ``rmsnorm_fn`` (Triton on a GPU, ``rms_norm_ref`` on the
    CPU), in the same layout."""
    device = ref.device
    leaves = {k: to_torch(arrays[k], dtypes[k], device, grad=True) for k in ("x", "weight", "z")}
    dout = to_torch(cotangent, dtypes["x"], device)

    def run():
        x, weight, z = leaves.values()
        return ref.rmsnorm_fn(x, weight, None, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate)

    return _calls(run, list(leaves.values()), dout, device, channels_first=False)


def mamba3_siso_calls(ref: Reference, arrays: dict, dtypes: dict, cotangent: np.ndarray, *, chunk_size: int):
    """Q, K (batch, L, G, N); V, Z (batch, L, H, P); ADT, DT, Trap (batch, H, L); Q_bias, K_bias (H, N); Angles
    (batch, L, H, S); D (H,): mamba-ssm's Triton ``mamba3_siso_combined``, in the same layouts (no copies)."""
    if ref.device != "cuda":
        raise RuntimeError("mamba-ssm's Mamba-3 op is Triton kernels only: it needs a GPU")
    from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined

    leaves = {k: to_torch(v, dtypes[k], ref.device, grad=True) for k, v in arrays.items()}
    dout = to_torch(cotangent, dtypes["V"], ref.device)

    def run():
        return mamba3_siso_combined(**leaves, chunk_size=chunk_size)

    return _calls(run, list(leaves.values()), dout, ref.device, channels_first=False)


def mamba3_siso_step_calls(
    ref: Reference, arrays: dict, dtypes: dict, arg_names: tuple, state_names: tuple, inputs: dict | None = None
) -> KernelCalls:
    """mamba-ssm's Triton ``mamba3_siso_step`` on the ``arg_names`` arrays (Q, K (batch, G, N); V, Z (batch, H, P);
    ADT, DT, Trap (batch, H); ...) and the ``state_names`` ones (angle, ssm, k, v), as a decode loop calls it:
    ``forward()`` runs one step for each leading index of ``inputs`` ({name: (steps, ...)}: those arguments' values
    step by step; one step of ``arrays`` without), each on the states the one before returned (a CUDA graph of it
    holds them all). Forward only; ``output`` is the first step's from ``arrays``."""
    if ref.device != "cuda":
        raise RuntimeError("mamba-ssm's Mamba-3 step is a Triton kernel: it needs a GPU")
    from mamba_ssm.ops.triton.mamba3.mamba3_siso_step import mamba3_siso_step

    args = {k: to_torch(arrays[k], dtypes[k], ref.device) for k in arg_names}
    states = tuple(to_torch(arrays[k], "float32", ref.device) for k in state_names)
    stacks = _step_stacks(inputs, dtypes, ref.device)
    with torch.no_grad():
        output = to_numpy(mamba3_siso_step(**args, Input_States=states)[0])

    def forward():
        carried = states
        with torch.no_grad():
            for step_inputs in stacks:
                out, carried = mamba3_siso_step(**(args | step_inputs), Input_States=tuple(carried))
        return out

    return KernelCalls(forward, None, _sync_cuda, output, 0, len(stacks))


def selective_state_update_calls(
    ref: Reference, arrays: dict, dtypes: dict, arg_names: tuple, inputs: dict | None = None
) -> KernelCalls:
    """mamba-ssm's Triton ``selective_state_update`` on the ``arg_names`` arrays and the float32 "state", which it
    updates in place, as a decode loop calls it (Mamba-2's per-head dt expanded over the head dims as a stride-0 view,
    as its layer passes it): ``forward()`` runs one step for each leading index of ``inputs`` (as
    ``mamba3_siso_step_calls``). Forward only; ``output`` is the first step's from ``arrays``."""
    if ref.device != "cuda":
        raise RuntimeError("mamba-ssm's selective_state_update is a Triton kernel: it needs a GPU")
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    state = to_torch(arrays["state"], "float32", ref.device)
    args = {k: to_torch(arrays[k], dtypes[k], ref.device) for k in arg_names}
    stacks = _step_stacks(inputs, dtypes, ref.device)
    if state.dim() == 4:  # per-head values as the Mamba-2 layer passes them: views over the head dims
        headdim, dstate = state.shape[2], state.shape[3]
        args, stacks = _per_head(args, headdim, dstate), [_per_head(x, headdim, dstate) for x in stacks]
    with torch.no_grad():
        output = to_numpy(selective_state_update(state.clone(), **args, dt_softplus=True))

    def forward():
        with torch.no_grad():
            for step_inputs in stacks:
                out = selective_state_update(state, **(args | step_inputs), dt_softplus=True)
        return out

    return KernelCalls(forward, None, _sync_cuda, output, 0, len(stacks))


def _step_stacks(inputs: dict | None, dtypes: dict, device) -> list[dict]:
    """``inputs`` ({name: (steps, ...) array}) as one {name: tensor} a step (views of one tensor a name, so that a
    CUDA graph of the steps reads them in place); [{}] (one step of the plain arguments) without."""
    if not inputs:
        return [{}]
    tensors = {k: to_torch(v, dtypes[k], device) for k, v in inputs.items()}
    steps = len(next(iter(tensors.values())))
    return [{k: t[i] for k, t in tensors.items()} for i in range(steps)]


def _per_head(args: dict, headdim: int, dstate: int) -> dict:
    """Mamba-2's per-head dt, A, D and dt_bias (those of them in ``args``) expanded over the head dims as stride-0
    views, as its layer passes them to ``selective_state_update``."""
    views = {
        "dt": lambda t: t.expand(-1, -1, headdim),
        "A": lambda t: t.expand(-1, headdim, dstate),
        "D": lambda t: t.expand(-1, headdim),
        "dt_bias": lambda t: t.expand(-1, headdim),
    }
    return {k: views[k](v) if k in views else v for k, v in args.items()}


def _sync_cuda(_output) -> None:
    torch.cuda.synchronize()


def _no_sync(_output) -> None:
    return None


def profiled_kernel_us(fn: Callable[[], object], calls: int = 5) -> dict[str, float]:
    """{kernel: device us per call} over ``calls`` calls of ``fn`` from one ``torch.profiler`` trace, largest first
    (the kernel-only time, without launch gaps)."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        by_pass, _ = kernels_by_pass(json.loads(path.read_text()), calls)
    totals: dict[str, float] = {}
    for kernels in by_pass.values():
        for name, us in kernels.items():
            totals[name] = totals.get(name, 0.0) + us
    return {name: round(us, 1) for name, us in sorted(totals.items(), key=lambda kv: -kv[1])}
