"""The passes of Mamba-3's SISO scan, run by the SSD's Mosaic GPU kernels (``pallas_kernels.ssd.mosaic_gpu``).

Those kernels read the decay of every position from XLA as vectors (``ssd.mosaic_gpu.common.decay_vectors``: each
input's weight, the cumulative log-decay within each block of 64 positions and its block total), so they take any
decay, not only Mamba-2's dt·A. Mamba-3's trapezoid makes the state S'_t = S_t + w_t v_t k_tᵀ (w_t the next step's
weight of this step's input, ``kernel_scan``) follow exactly the SSD's recurrence S'_t = exp(ADT_t) S'_{t-1} + scale_t
v_t k_tᵀ, so these passes are the SSD's: the forward walk (``ssd.mosaic_gpu.forward``), the reverse state walk
(``ssd.mosaic_gpu.states``) and the backward's per-head and dB/dC kernels (``ssd.mosaic_gpu.backward_dx``,
``backward_dbc``), with one group per head (each head has its own rotated k and q). Where the SSD's default config
for these sizes splits the walk into segments (few programs for the SMs, long sequences), so does this: each
segment's end state by the state walk, the walk over segments (``ssd.triton.segments``), then the forward walk per
segment from its incoming state, and the mirror image in the backward (``ssd.dispatch.mosaic_segment_starts``,
``mosaic_dstates``, shared with the SSD).

Layouts: x, dy (batch, L, H, P) and k, q (batch, L, H, N) in one 16-bit dtype; ``vectors`` (scale, cs, cs_last) each
(batch, H, L) float32; D (H, P) float32 or None; start, dfinal (batch, H, P, N) float32; L a multiple of 64, P and
N multiples of 64 (``kernel_scan`` pads them).
"""

import jax
import jax.numpy as jnp

from pallas_kernels.ssd.config import SsdConfig
from pallas_kernels.ssd.dims import SsdDims, segment_dims, ssd_dims
from pallas_kernels.ssd.dispatch import mosaic_dstates, mosaic_segment_starts, walk_loop
from pallas_kernels.ssd.mosaic_gpu.backward_dbc import mosaic_dbc, mosaic_dbc_supported
from pallas_kernels.ssd.mosaic_gpu.backward_dx import decay_gradients, dx_kernel_call, dx_kernel_inputs
from pallas_kernels.ssd.mosaic_gpu.common import TILE, backward_vectors
from pallas_kernels.ssd.mosaic_gpu.forward import mosaic_walk


def scan_dims(x: jax.Array, k: jax.Array, D, start, interpret: bool) -> SsdDims:
    """The SSD's problem description of a Mamba-3 scan: one group a head (k (batch, L, H, N)), no z (the gate and
    the trapezoid's own correction follow in XLA), no dt processing (the scale comes as it is)."""
    return ssd_dims(x, k, D, None, None, start, None, False, (0.0, float("inf")), TILE, x.shape[3], interpret)


def scan_forward(x, vectors, k, q, D, start, dims: SsdDims, config: SsdConfig, save: bool):
    """Returns y = S q + D x (batch, L, H, P) in x's dtype, the final state (batch, H, P, N) float32 and, when
    ``save``, every block's incoming state (batch, L / 64, H, P, N) in x's dtype (else None)."""
    segments = segment_dims(dims, config) if config.fused_segments else None
    if segments is None:
        starts = None if start is None else start[:, None]
        walk = dict(segment_blocks=dims.nblocks, states=save, ypre=False, end=True, **walk_loop(config))
        y, _, states, end = mosaic_walk(x, vectors, k, q, D, None, starts, dims, **walk)
        return y, end[:, 0], states
    blocks = segments.keep_blocks
    kept, final = mosaic_segment_starts(x, k, vectors, start, segments, config, op="mamba3")
    walk = dict(segment_blocks=blocks, states=save, ypre=False, end=False, **walk_loop(config))
    y, _, states, _ = mosaic_walk(x, vectors, k, q, D, None, kept, segments, **walk)
    return y, final, states


def scan_backward(x, vectors, k, q, D, states, dy, dfinal, dims: SsdDims, config: SsdConfig):
    """The gradients of ``scan_forward``'s inputs from dy (like y) and dfinal: dx in x's dtype, d scale and d
    log-decay (batch, H, L) float32, dk and dq in k's dtype, dD (H, P) float32 or None, d start or None."""
    segments = segment_dims(dims, config) if config.two_level_backward else None
    dstates, dstart = mosaic_dstates(dy, q, vectors, None, dfinal, dims, segments, config, op="mamba3")
    decays = backward_vectors(vectors)
    inputs = dx_kernel_inputs(x, decays, k, q, D, None, states, dstates, dy, dims)
    dx, dD, sds, dcs, carry, xdx = dx_kernel_call(inputs, dims)
    dlog, dscale = decay_gradients(vectors[1], dcs, carry, xdx, sds)
    columns = config.bwd_dbc_columns if mosaic_dbc_supported(dims, x.dtype, config.bwd_dbc_columns) else TILE
    dk, dq = mosaic_dbc(x, decays, k, q, None, states, dstates, dy, dims, columns)
    whole = lambda v: v.reshape(dims.batch, dims.nheads, dims.seqlen)  # noqa: E731
    dD = None if D is None else dD.sum(axis=(0, 1)).astype(jnp.float32)
    return dx, whole(dscale), whole(dlog), dk, dq, dD, dstart
