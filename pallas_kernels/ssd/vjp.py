"""The Pallas SSD as a differentiable function: forward kernels, backward kernels, ``jax.custom_vjp``.

Arguments are pre-checked by ``api.mamba_chunk_scan_combined``: x, z (batch, L, H, P); dt (batch, L, H); A (H,)
float32; B, C (batch, L, G, N) in x's dtype; D (H, P) float32 or None; dt_bias (H,) or None; initial_states
(batch, H, P, N) float32 or None; seq_idx int32 (batch, L) or None. Returns (out (batch, L, H, P) in x.dtype, final
states (batch, H, P, N) float32). Residuals for the backward: the inputs, the block-start states (batch,
L / block_l, H, P, N) in x.dtype (or, with ``config.checkpoint_every``, every that many positions' state in float32,
from which the backward first rebuilds the block states) and, with z, the pre-gate output where the backward's per-head
kernel reads it (on Triton; the Mosaic GPU one recomputes it: ``dispatch.dx_on_mosaic``).
"""

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from pallas_kernels.ssd.config import SsdConfig
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.dispatch import rebuild_block_states, ssd_backward, ssd_forward

# The kept states' name for jax.checkpoint policies: a rematerialized region that saves them
# (jax.checkpoint_policies.save_only_these_names(STATES_NAME, ...)) recomputes the SSD's inputs in the backward but
# never reruns its forward kernels for them.
STATES_NAME = "ssd_states"


# The forward's and the backward's kernels under ``jax.jit``, so that every call of the same shapes and tiling shares
# one lowering of each. A Mosaic GPU kernel's module carries the source locations of its call, so each layer of a
# model was otherwise a different kernel (its own ``kernel_hash``) to lower and compile: 96 kernels instead of 4 for
# mamba2-130m's 24 layers, minutes before the first training step (``docs/kernels.md#compiled-once-per-shape``).
_forward_once = jax.jit(ssd_forward, static_argnums=(10, 11, 12))


@functools.partial(jax.custom_vjp, nondiff_argnums=(10, 11))
def ssd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dims: SsdDims, config: SsdConfig):
    out, final, _, _ = _forward_once(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dims, config, False)
    return out, final


def _ssd_fwd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dims, config):
    args = (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx)
    out, final, states, ypre = _forward_once(*args, dims, config, True)
    kept = checkpoint_name(states, STATES_NAME)
    return (out, final), (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, kept, ypre)


def _ssd_bwd(dims: SsdDims, config: SsdConfig, residuals, cotangents):
    return _backward_once(residuals, cotangents, dims, config)


@functools.partial(jax.jit, static_argnums=(2, 3))  # lowered once for every call of these shapes (``_forward_once``)
def _backward_once(residuals, cotangents, dims: SsdDims, config: SsdConfig):
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, states, ypre = residuals
    dout, dfinal = cotangents
    if dims.keep_blocks > 1:
        states = rebuild_block_states(x, dt, A, B, dt_bias, seq_idx, states, dims, config)
    bdims = dims.with_block_p(dims.headdim)  # the block-parallel backward keeps whole heads
    dx, ddt, dB, dC, dA, dD, dz, dbias, dinit = ssd_backward(
        *(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, states, ypre),
        dout.astype(x.dtype),
        dfinal.astype(jnp.float32),
        bdims,
        config,
    )
    batch, seqlen, ngroups, dstate = B.shape
    dB = dB.reshape(batch, seqlen, ngroups, -1, dstate).sum(axis=3).astype(B.dtype)
    dC = dC.reshape(batch, seqlen, ngroups, -1, dstate).sum(axis=3).astype(C.dtype)
    dA = dA.sum(axis=(0, 1)).astype(A.dtype)
    dD = None if D is None else dD.sum(axis=(0, 1)).astype(D.dtype)
    dbias = None if dt_bias is None else dbias.sum(axis=(0, 1)).astype(dt_bias.dtype)
    dinit = None if initial_states is None else dinit.astype(initial_states.dtype)
    return dx, ddt, dA, dB, dC, dD, dz, dbias, dinit, None


ssd.defvjp(_ssd_fwd, _ssd_bwd)
