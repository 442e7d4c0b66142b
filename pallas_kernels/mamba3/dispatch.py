"""Which path runs Mamba-3's sequence ops under ``impl="pallas"``: the reference's SISO and MIMO functions with their
recurrence on the Mosaic GPU kernels (``kernel_scan``) for 16-bit V, whose products the kernels take in that dtype,
and N up to the kernels' 256; the reference whole elsewhere (float32 and float64 V: the kernels have no float32
products, the reference keeps float32). Sequences packed by ``cu_seqlens`` run one at a time on the same path."""

import functools

import jax.numpy as jnp

from pallas_kernels._triton import gpu_compute_capability, gpu_has_wgmma, interpret_mode
from pallas_kernels.mamba3 import reference
from pallas_kernels.mamba3.kernel_scan import kernel_scan, padded_size
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
