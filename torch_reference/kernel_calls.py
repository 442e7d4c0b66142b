"""mamba-ssm's kernels as zero-argument callables for the kernel benchmarks (``compare.kernels`` times them).

Inputs arrive as float32 numpy in jax_mamba's channels-last layouts and are laid out the way mamba-ssm's modules
feed its kernels (channels first), so each side is timed in its native layout.
"""

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from torch_reference._tensors import to_numpy, to_torch
from torch_reference.backend import Reference


@dataclasses.dataclass
class KernelCalls:
    forward: Callable[[], object]  # runs the forward
    forward_backward: Callable[[], object]  # runs the forward and backpropagates the fixed cotangent
    sync: Callable[[object], None]  # sync(output): waits until the device has finished
    output: np.ndarray  # the forward's output, channels-last float32


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

    def forward():  # inference: no autograd graph, so nothing is saved for a backward
        with torch.no_grad():
            return run()

    def forward_backward():
        return torch.autograd.grad(run(), leaves, dout)

    output = to_numpy(forward()).transpose(0, 2, 1)
    return KernelCalls(forward, forward_backward, _sync_cuda if device == "cuda" else _no_sync, output)


def _sync_cuda(_output) -> None:
    torch.cuda.synchronize()


def _no_sync(_output) -> None:
    return None
