"""Which path runs Mamba-3's SISO op under ``impl="pallas"``: the Mosaic GPU kernels (``siso_scan``) for 16-bit V,
whose products they take in that dtype, the reference for float32 and float64 V (the kernels have no float32
products; the reference keeps float32). Sequences packed by ``cu_seqlens`` run one at a time on the same path."""

import jax.numpy as jnp

from pallas_kernels._triton import gpu_compute_capability, gpu_has_wgmma, interpret_mode
from pallas_kernels.mamba3 import reference
from pallas_kernels.mamba3.siso_scan import mamba3_siso_kernels, padded_size
from pallas_kernels.ssd.api import pallas_config

KERNEL_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def siso_on_kernels(dtype) -> bool:
    """Whether ``impl="pallas"`` runs the SISO op on the Mosaic GPU kernels for V of this dtype."""
    return jnp.dtype(dtype) in KERNEL_DTYPES


def check_kernels_run() -> None:
    """The Mosaic GPU kernels compile for Hopper's ``wgmma`` only (interpreted anywhere without a GPU)."""
    if not interpret_mode() and not gpu_has_wgmma():
        raise ValueError(
            "mamba3_siso_combined(impl='pallas') runs Mosaic GPU kernels that need Hopper's wgmma (compute "
            f"capability 9.x), this GPU has {gpu_compute_capability()}: use impl='reference'"
        )


def mamba3_siso(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, states=None, chunk_size: int = 64):
    """``reference.mamba3_siso``'s signature and results, on the kernels where ``siso_on_kernels``."""
    if not siso_on_kernels(V.dtype):
        return reference.mamba3_siso(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, states, chunk_size)
    batch, seqlen, heads, headdim = V.shape
    sizes = (padded_size(seqlen), heads, padded_size(headdim), padded_size(Q.shape[-1]))
    config = pallas_config(batch, *sizes, V.dtype, ngroups=heads)
    args = (Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, states, chunk_size)
    return mamba3_siso_kernels(*args, config=config, interpret=interpret_mode())
