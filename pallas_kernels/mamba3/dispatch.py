"""Which path runs Mamba-3's sequence ops under ``impl="pallas"``: the reference's SISO and MIMO functions with their
recurrence on the Mosaic GPU kernels (``kernel_scan``) for 16-bit V, whose products the kernels take in that dtype,
and N up to the kernels' 256; the reference whole elsewhere (float32 and float64 V: the kernels have no float32
products, the reference keeps float32). Sequences packed by ``cu_seqlens`` run one at a time on the same path.
The decoding steps update the state on the step kernel (``kernel_step``) for float32 arithmetic (every V but
float64) where P is a multiple of 64 and N of 8, on the reference's update elsewhere."""

import functools

import jax.numpy as jnp

from pallas_kernels._triton import gpu_compute_capability, gpu_has_wgmma, interpret_mode
from pallas_kernels.mamba3 import reference
from pallas_kernels.mamba3.kernel_scan import kernel_scan, padded_size
from pallas_kernels.mamba3.kernel_step import kernel_step_state, on_step_kernel
from pallas_kernels.ssd.mosaic_gpu.common import MAX_DSTATE

KERNEL_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def on_kernels(dtype, dstate: int) -> bool:
    """Whether ``impl="pallas"`` runs the recurrence on the Mosaic GPU kernels for V of this dtype and N."""
    return jnp.dtype(dtype) in KERNEL_DTYPES and padded_size(dstate) <= MAX_DSTATE


def check_kernels_run(op: str) -> None:
    """The Mosaic GPU kernels compile for Hopper's ``wgmma`` only (interpreted anywhere without a GPU)."""
    if not interpret_mode() and not gpu_has_wgmma():
        raise ValueError(
            f"{op}(impl='pallas') runs Mosaic GPU kernels that need Hopper's wgmma (compute capability 9.x), this GPU "
            f"has {gpu_compute_capability()}: use impl='reference'"
        )


def _scan_for(dtype, dstate: int):
    """The recurrence for V of ``dtype`` and N: the kernels' where ``on_kernels``, else the reference's (None)."""
    if not on_kernels(dtype, dstate):
        return None
    return functools.partial(kernel_scan, dtype=dtype, interpret=interpret_mode())


def mamba3_siso(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, states=None, chunk_size: int = 64):
    """``reference.mamba3_siso``'s signature and results, the recurrence on the kernels where ``on_kernels``."""
    args = (Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, states, chunk_size)
    return reference.mamba3_siso(*args, scan=_scan_for(V.dtype, Q.shape[-1]))


def mamba3_mimo(**kwargs):
    """``reference.mamba3_mimo``'s (keyword) arguments and results, the recurrence on the kernels where
    ``on_kernels``."""
    return reference.mamba3_mimo(**kwargs, scan=_scan_for(kwargs["V"].dtype, kwargs["Q"].shape[-1]))


def _step_for(dtype, headdim: int, dstate: int):
    """The decoding step's state update for V of ``dtype``, P and N: the kernel's where ``on_step_kernel``, else the
    reference's (None)."""
    if not on_step_kernel(dtype, headdim, dstate):
        return None
    interpret = interpret_mode()

    def step(ssm0, q, k, u, u0, k0, ADT, DT, Trap, compute):
        return kernel_step_state(ssm0, q, k, u, u0, k0, ADT, DT, Trap, interpret)

    return step


def mamba3_siso_step(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, states=None):
    """``reference.mamba3_siso_step``'s signature and results, the state update on the kernel where it runs."""
    step = _step_for(V.dtype, V.shape[-1], Q.shape[-1])
    return reference.mamba3_siso_step(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, states, step=step)


def mamba3_mimo_step(**kwargs):
    """``reference.mamba3_mimo_step``'s (keyword) arguments and results, the state update on the kernel where it
    runs."""
    step = _step_for(kwargs["V"].dtype, kwargs["V"].shape[-1], kwargs["Q"].shape[-1])
    return reference.mamba3_mimo_step(**kwargs, step=step)
