"""Mosaic GPU forward of the selective scan: out, the last state and the states the backward starts from; and the
first pass of a forward split into segments, each segment's end state from zero.

One warpgroup a program: batch row b, 128 channels of one group (one a thread), one segment of L (``common``). The
program keeps its (N, 128) float32 state in registers, N rows of 128, and walks its segment one step at a time, each
block of ``block_l`` steps of u, delta, z, B and C coming into shared memory by TMA while the block before it
computes (``emit_pipeline``). Per step, with dt = softplus(delta + delta_bias) (or without either):

    h[n] = exp(dt A[n]) h[n] + dt u B[n],   y = sum_n C[n] h[n] + D u,   out = y silu(z)

B[n] and C[n] are one value for all the program's channels. A segment starts from its true start state (given, from
``segment_end_states`` composed by ``state_passing``), the first from zero. The state before every
``keep_every``-th step is stored for the backward (``padded_rows`` layout, as the Triton kernels write it), and
the last state after L.
Layouts: u, delta, z, out (batch, L, dim); B, C (batch, L, G, N); A2 = A log2(e) as (N, dim + 1) float32; D,
delta_bias (dim,) float32; segment starts and ends (batch, segments, N, dim + 1), dt sums (batch, segments, dim),
states (batch, L / keep_every, N, dim + 1) float32.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import call_kernel, sigmoid, store_steps
from pallas_kernels.selective_scan.mosaic_gpu.common import (
    LANES,
    MosaicScanDims,
    step_dt,
    step_keep,
    walk_segment,
)

BLOCK_L = 32  # steps a block (fewer where the states are kept more often)


def _fwd_kernel(u_ref, delta_ref, a2_ref, b_ref, *refs, dims: MosaicScanDims, mode: str, save_states: bool):
    """``mode``: "forward" (out and the last state, from each segment's start state), "ends" (segment s's state
    after its last step from zero and its dt sum, for the grid's segments: all but the last) or "rebuild" (no
    outputs: the states at every block start, segments of ``keep_every`` steps from the states the forward kept)."""
    forward = mode == "forward"
    it = iter(refs)
    c_ref = next(it) if forward else None
    d_ref = next(it) if dims.has_D and forward else None
    z_ref = next(it) if dims.has_z and forward else None
    bias_ref = next(it) if dims.has_bias else None
    starts_ref = next(it) if mode == "rebuild" or (forward and dims.nsegments > 1) else None
    keep_ref = next(it) if dims.has_keep else None
    if mode == "ends":
        ends_ref, dt_sums_ref = it
    elif mode == "rebuild":
        (states_ref,) = it
    else:
        out_ref, last_ref, *rest = it
        states_ref = rest.pop(0) if save_states else None
        (o_s,) = rest
    f32 = jnp.float32
    b, blk, seg = lax.axis_index("batch"), lax.axis_index("channels"), lax.axis_index("segments")
    g = blk // dims.blocks_per_group
    cols = pl.ds(blk * LANES, LANES)
    first = seg * dims.blocks_per_segment  # the segment's first block

    def row(ref) -> jax.Array:
        return plgpu.load(ref, layout=dims.row_layout, optimized=False).astype(f32)

    a2 = [row(a2_ref.at[n, cols]) for n in range(dims.dstate)]
    dv = row(d_ref.at[cols]) if d_ref is not None else None
    bias = row(bias_ref.at[cols]) if bias_ref is not None else None
    zero = plgpu.layout_cast(jnp.zeros((LANES,), f32), dims.row_layout)
    kept_blocks = dims.keep_every // dims.block_l

    def block_step(indices, u_s, delta_s, *tiles_and_carry):
        *tiles, (h, dt_sum) = tiles_and_carry
        (j,) = indices
        block = first + j
        inside = block < dims.nblocks
        z_tiles = tiles[:1] if z_ref is not None else []
        keep_s = tiles[-1] if keep_ref is not None else None
        b_s, *c_tiles = tiles[len(z_tiles) : len(tiles) - (keep_s is not None)]
        if forward:
            (c_s,) = c_tiles
            plgpu.wait_smem_to_gmem(1, wait_read_only=True)  # the store from this slot two blocks ago has read it
            out_s = o_s.at[j % 2]
        if save_states:

            @pl.when(inside & (block % kept_blocks == 0))
            def _():
                for n in range(dims.dstate):
                    states_ref.at[b, block // kept_blocks, n, cols][...] = h[n]

        def step(r, carry):
            h, dt_sum = carry
            u = plgpu.load(u_s.at[r], layout=dims.row_layout).astype(f32)
            _, dt, mask = step_dt(delta_s, r, bias, block, dims)
            x = dt * u
            y = zero if dv is None else dv * u
            keep = None if keep_s is None else step_keep(keep_s, r, mask)
            carried = h if keep is None else tuple(keep * hn for hn in h)  # zero where a sequence starts
            new = []
            for n in range(dims.dstate):
                state = jnp.exp2(dt * a2[n]) * carried[n] + x * b_s[r, n].astype(f32)
                if forward:
                    y = y + c_s[r, n].astype(f32) * state
                new.append(state)
            if forward:
                if z_tiles:
                    zr = plgpu.load(z_tiles[0].at[r], layout=dims.row_layout).astype(f32)
                    y = y * zr * sigmoid(zr)
                out_s[r] = y.astype(out_s.dtype)
            return tuple(new), (dt_sum + dt if mode == "ends" else dt_sum)  # only the boundary pass needs it

        carry = lax.fori_loop(0, dims.block_l, step, (h, dt_sum))
        if forward:
            plgpu.commit_smem()
            pl.when(inside)(
                lambda: store_steps(out_s, lambda steps: out_ref.at[b, steps, cols], block, dims.block_l, dims.seqlen)
            )
        return carry

    channels = [u_ref.at[b], delta_ref.at[b]] + ([z_ref.at[b]] if z_ref is not None else [])
    states = [b_ref.at[b, :, g]] + ([c_ref.at[b, :, g]] if c_ref is not None else [])
    states += [keep_ref.at[b]] if keep_ref is not None else []
    if starts_ref is not None:
        h0 = tuple(row(starts_ref.at[b, seg, n, cols]) for n in range(dims.dstate))
    else:
        h0 = tuple(zero for _ in range(dims.dstate))
    h, dt_sum = walk_segment(block_step, dims, lambda j: first + j, channels, states, blk, (h0, zero))
    if mode == "ends":
        for n in range(dims.dstate):
            ends_ref.at[b, seg, n, cols][...] = h[n]
        dt_sums_ref.at[b, seg, cols][...] = dt_sum
    if not forward:
        return

    @pl.when(seg == dims.nsegments - 1)  # the last segment's walk ends after L (steps past it are masked)
    def _():
        for n in range(dims.dstate):
            last_ref.at[b, n, cols][...] = h[n]

    plgpu.wait_smem_to_gmem(0)


def _call(inputs: list, out_type: list, scratch: list, segments: int, name: str, dims: MosaicScanDims, **flags):
    return call_kernel(
        functools.partial(_fwd_kernel, dims=dims, **flags),
        inputs,
        out_type=out_type,
        scratch=scratch,
        grid=(dims.batch, dims.dim // LANES, segments),
        grid_names=("batch", "channels", "segments"),
        name=name,
        interpret=dims.interpret,
    )


def segment_end_states(u, delta, a2, B, delta_bias, keep, dims: MosaicScanDims):
    """Every segment's end state from zero (batch, segments - 1, N, dim + 1) and its dt sum (batch, segments - 1,
    dim), float32, for all segments but the last. ``keep``: the keep mask (batch, L, KEEP_LANES) where
    ``dims.has_keep``."""
    inputs = [u, delta, a2, B] + ([delta_bias.astype(jnp.float32)] if delta_bias is not None else [])
    inputs += [keep] if dims.has_keep else []
    count = dims.nsegments - 1
    out_type = [
        jax.ShapeDtypeStruct((dims.batch, count, dims.dstate, dims.dim + 1), jnp.float32),
        jax.ShapeDtypeStruct((dims.batch, count, dims.dim), jnp.float32),
    ]
    args = (inputs, out_type, [], count, "selective_scan_segment_ends", dims)
    return _call(*args, mode="ends", save_states=False)


def rebuild_states(u, delta, a2, B, delta_bias, kept, keep, dims: MosaicScanDims):
    """The states before every block (batch, L / block_l, N, dim + 1) float32 from those kept every
    ``dims.segment_len`` steps (batch, L / segment_len, N, dim + 1): each kept interval a segment walked again from
    its kept state, without outputs. ``keep``: the keep mask (batch, L, KEEP_LANES) where ``dims.has_keep``."""
    inputs = [u, delta, a2, B] + ([delta_bias.astype(jnp.float32)] if delta_bias is not None else []) + [kept]
    inputs += [keep] if dims.has_keep else []
    shape = (dims.batch, dims.nblocks, dims.dstate, dims.dim + 1)
    args = (inputs, [jax.ShapeDtypeStruct(shape, jnp.float32)], [], dims.nsegments, "selective_scan_rebuild", dims)
    (states,) = _call(*args, mode="rebuild", save_states=True)
    return states


def scan_forward(u, delta, a2, B, C, D, z, delta_bias, starts, keep, dims: MosaicScanDims, save_states: bool):
    """Returns out (batch, L, dim) u.dtype, the last state (batch, N, dim) float32 and the states before every
    ``keep_every``-th step (batch, L / keep_every, N, dim + 1) float32, or None. ``starts``: every segment's start
    state (batch, segments, N, dim + 1) float32, or None for one segment; ``keep``: the keep mask (batch, L,
    KEEP_LANES) where ``dims.has_keep``."""
    inputs = [u, delta, a2, B, C]
    inputs += [x.astype(jnp.float32) if x is D else x for x in (D, z) if x is not None]
    inputs += [delta_bias.astype(jnp.float32)] if delta_bias is not None else []
    inputs += [starts] if dims.nsegments > 1 else []
    inputs += [keep] if dims.has_keep else []
    out_type = [
        jax.ShapeDtypeStruct(u.shape, u.dtype),
        jax.ShapeDtypeStruct((dims.batch, dims.dstate, dims.dim + 1), jnp.float32),
    ]
    if save_states:
        out_type.append(jax.ShapeDtypeStruct((dims.batch, dims.nkept, dims.dstate, dims.dim + 1), jnp.float32))
    scratch = [plgpu.SMEM((2, dims.block_l, LANES), u.dtype)]
    args = (inputs, out_type, scratch, dims.nsegments, "selective_scan_fwd", dims)
    results = _call(*args, mode="forward", save_states=save_states)
    return results[0], results[1][..., : dims.dim], (results[2] if save_states else None)
