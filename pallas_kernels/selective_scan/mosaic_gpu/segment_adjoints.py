"""Mosaic GPU first pass of a backward split into segments: what each segment does to the adjoint on its own.

One warpgroup a program as in ``common``: batch row b, 128 channels, segment s (all but the first). From zero after
the segment's last step it walks the segment last step to first, N adjoint rows in registers, each block of delta,
dout, z and C coming in by TMA while the block after it computes:

    v[n] = exp(dt A[n]) (C[n] dy + v[n]),   dy = dout silu(z) (dout without z)

v is what the backward kernel carries from a segment into the last step of the segment before it
(``sequential_backward``): the segment maps the carry it receives, c, to exp(A sum dt) c + v, dt summed over its
own steps, so ``state_passing.chunk_end_adjoints`` composes these into every segment's true carry.
Layouts: delta, dout, z (batch, L, dim); C (batch, L, G, N); A2 = A log2(e) as (N, dim + 1) float32; delta_bias
(dim,) float32; v (batch, segments - 1, N, dim + 1) and dt sums (batch, segments - 1, dim) float32.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import call_kernel, sigmoid
from pallas_kernels.selective_scan.mosaic_gpu.common import (
    LANES,
    MosaicScanDims,
    step_dt,
    step_keep,
    walk_segment,
)


def _adjoint_kernel(delta_ref, a2_ref, c_ref, dout_ref, *refs, dims: MosaicScanDims):
    it = iter(refs)
    z_ref = next(it) if dims.has_z else None
    bias_ref = next(it) if dims.has_bias else None
    keep_ref = next(it) if dims.has_keep else None
    local_ref, dt_sums_ref = it
    f32 = jnp.float32
    b, blk, s = lax.axis_index("batch"), lax.axis_index("channels"), lax.axis_index("segments")
    g = blk // dims.blocks_per_group
    cols = pl.ds(blk * LANES, LANES)
    last = (s + 2) * dims.blocks_per_segment - 1  # segment s + 1's last block

    def row(ref) -> jax.Array:
        return plgpu.load(ref, layout=dims.row_layout, optimized=False).astype(f32)

    a2 = [row(a2_ref.at[n, cols]) for n in range(dims.dstate)]
    bias = row(bias_ref.at[cols]) if bias_ref is not None else None
    zero = plgpu.layout_cast(jnp.zeros((LANES,), f32), dims.row_layout)

    def block_step(indices, delta_s, dout_s, *tiles_and_carry):
        *tiles, (v, dt_sum) = tiles_and_carry
        z_tiles = tiles[:1] if z_ref is not None else []
        c_s, *keep_tiles = tiles[len(z_tiles) :]
        (j,) = indices
        block = last - j

        def step(i, carry):
            v, dt_sum = carry
            r = dims.block_l - 1 - i
            _, dt, mask = step_dt(delta_s, r, bias, block, dims)
            dy = plgpu.load(dout_s.at[r], layout=dims.row_layout).astype(f32) * mask
            if z_tiles:
                zr = plgpu.load(z_tiles[0].at[r], layout=dims.row_layout).astype(f32)
                dy = dy * zr * sigmoid(zr)
            keep = step_keep(keep_tiles[0], r, mask) if keep_tiles else 1.0  # 0 where a packed sequence starts
            new = tuple(keep * jnp.exp2(dt * a2[n]) * (c_s[r, n].astype(f32) * dy + v[n]) for n in range(dims.dstate))
            return new, dt_sum + dt

        return lax.fori_loop(0, dims.block_l, step, (v, dt_sum))

    channels = [delta_ref.at[b], dout_ref.at[b]] + ([z_ref.at[b]] if z_ref is not None else [])
    init = (tuple(zero for _ in range(dims.dstate)), zero)
    states = [c_ref.at[b, :, g]] + ([keep_ref.at[b]] if keep_ref is not None else [])
    v, dt_sum = walk_segment(block_step, dims, lambda j: last - j, channels, states, blk, init)
    for n in range(dims.dstate):
        local_ref.at[b, s, n, cols][...] = v[n]
    dt_sums_ref.at[b, s, cols][...] = dt_sum


def segment_adjoints(delta, a2, C, dout, z, delta_bias, keep, dims: MosaicScanDims):
    """Segments 1..'s carries from zero (batch, segments - 1, N, dim + 1) and dt sums (batch, segments - 1, dim),
    float32. ``keep``: the packed sequences' keep mask (batch, L, KEEP_LANES) where ``dims.has_keep``."""
    inputs = [delta, a2, C, dout] + ([z] if z is not None else [])
    inputs += [delta_bias.astype(jnp.float32)] if delta_bias is not None else []
    inputs += [keep] if dims.has_keep else []
    count = dims.nsegments - 1
    out_type = [
        jax.ShapeDtypeStruct((dims.batch, count, dims.dstate, dims.dim + 1), jnp.float32),
        jax.ShapeDtypeStruct((dims.batch, count, dims.dim), jnp.float32),
    ]
    return call_kernel(
        functools.partial(_adjoint_kernel, dims=dims),
        inputs,
        out_type=out_type,
        scratch=[],
        grid=(dims.batch, dims.dim // LANES, count),
        grid_names=("batch", "channels", "segments"),
        name="selective_scan_segment_adjoints",
        interpret=dims.interpret,
    )
