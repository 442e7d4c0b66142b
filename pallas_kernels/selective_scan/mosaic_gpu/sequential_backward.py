"""Mosaic GPU backward of the selective scan: every input gradient from the states saved at every block start.

One warpgroup a program, as the forward: batch row b, 128 channels of one group (one a thread), one segment of L
(``common``), walked last block to first; each block of ``block_l`` steps of u, delta, dout, z, B and C comes into
shared memory by TMA while the block after it computes (``emit_pipeline`` over the blocks in reverse). The adjoint
enters the segment's last step as its carry: d last_state for the last segment, for the others what
``segment_adjoints`` found, composed. Per block and per state n (a loop, so that registers hold one state's
``block_l`` steps rather than every state's), from the saved state before the block's first step it recomputes the
block's states h_t[n] (registers), then runs the adjoint back over them:

    g_t = C_t dy_t + exp(dt_{t+1} A) g_{t+1}            (dL/dh_t; g after the last step = d last_state)
    du_t = dt_t sum_n g_t B_t + D dy_t,    ddt_t = u_t sum_n g_t B_t + sum_n g_t h_{t-1} exp(dt_t A) A
    dA  += g_t h_{t-1} exp(dt_t A) dt_t,   dB_t = sum_d g_t dt_t u_t,   dC_t = sum_d dy_t h_t

with dy = dout silu(z) (dout without z) and dz = dout y silu'(z). The carried adjoint exp(dt_t A) g_t, the dA
sums, A2's rows and the state before the block live in shared memory (one (N, 128) row each, a thread its own
column, so no barrier orders them); the next block's saved state is loaded from global memory at the start of a
block and lands in shared memory at its end, so that no step waits on global memory. dB and dC sum
over channels: each step's per-channel terms go to one (64, 128) shared tile, dB's to its first 32 rows and dC's
to the rest, a round of states at a time, which the warpgroup reads back in the WGMMA layout (a row's 128 columns
over a quad of threads) and sums along its rows, so that a block's sums over the program's channels, 64 a round,
leave in one copy. One tile for both keeps a program's shared memory at N 16 near 95 KiB by count, under half an
SM's (a tile each would take 127 KiB). Programs of the same group write side by side; the caller sums those partials, in
a fixed order: deterministic.
Layouts: u, delta, z, dout, du, ddelta, dz (batch, L, dim); B, C (batch, L, G, N); A2 = A log2(e) as (N, dim + 1)
float32; D, delta_bias (dim,) float32; states (batch, L / block_l, N, dim + 1) float32, the state before each
block; carries (batch, segments, N, dim + 1) float32; the kernel's dB and dC partials (batch, G, dim / G / 128,
blocks x rounds x 64) float32, per block and round of states 32 sums of dB's rows then 32 of dC's (``sum_rounds``);
dA (batch, segments, N, dim), dD, d delta_bias (batch, segments, dim) float32.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import call_kernel, sigmoid, store_steps
from pallas_kernels._triton import LN_2
from pallas_kernels.selective_scan.mosaic_gpu.common import (
    LANES,
    MosaicScanDims,
    check_tma_slots,
    clamped_block,
    step_dt,
    step_keep,
    walk_segment,
)

SUM_ROWS = 64  # rows of the sum tile summed at once: the WGMMA layout's tile height
HALF_ROWS = SUM_ROWS // 2  # a round's dB terms fill the tile's first half, its dC terms the second


def states_per_round(dims: MosaicScanDims) -> int:
    """States whose dB and dC terms fill the sum tile between two sums: the largest divisor of N with at most
    HALF_ROWS rows (block_l each) of each."""
    fit = max(1, HALF_ROWS // dims.block_l)
    return max(d for d in range(1, min(fit, dims.dstate) + 1) if dims.dstate % d == 0)


def sum_rounds(dims: MosaicScanDims) -> int:
    """Rounds of states a block: each leaves SUM_ROWS sums, HALF_ROWS of dB's then HALF_ROWS of dC's (the rows past
    a round's states x block_l unused)."""
    return dims.dstate // states_per_round(dims)


def _bwd_kernel(u_ref, delta_ref, a2_ref, b_ref, c_ref, states_ref, dout_ref, carries_ref, *refs, dims: MosaicScanDims):
    it = iter(refs)
    d_ref = next(it) if dims.has_D else None
    z_ref = next(it) if dims.has_z else None
    bias_ref = next(it) if dims.has_bias else None
    keep_ref = next(it) if dims.has_keep else None
    du_ref, ddelta_ref, dbc_ref, da_ref = (next(it) for _ in range(4))
    dz_ref = next(it) if dims.has_z else None
    dd_ref = next(it) if dims.has_D else None
    dbias_ref = next(it) if dims.has_bias else None
    g_s, da_s, a2_s, h_s, du_s, ddt_s, dz_s, sum_bc, sums_s = it
    f32 = jnp.float32
    steps, nstate = dims.block_l, dims.dstate
    b, blk, seg = lax.axis_index("batch"), lax.axis_index("channels"), lax.axis_index("segments")
    g, k = blk // dims.blocks_per_group, blk % dims.blocks_per_group
    last = (seg + 1) * dims.blocks_per_segment - 1  # the segment's last block (past L in the last segment maybe)
    cols = pl.ds(blk * LANES, LANES)
    layout = dims.row_layout
    per_round, rounds = states_per_round(dims), sum_rounds(dims)

    def row(ref) -> jax.Array:
        return plgpu.load(ref, layout=layout, optimized=False).astype(f32)

    zero = plgpu.layout_cast(jnp.zeros((LANES,), f32), layout)
    dv = row(d_ref.at[cols]) if d_ref is not None else None
    bias = row(bias_ref.at[cols]) if bias_ref is not None else None
    first = seg * dims.blocks_per_segment  # the segment's first block

    def block_states(block) -> list[jax.Array]:
        """The saved state rows before ``block`` (clamped into L and the segment): N global loads."""
        at = jnp.maximum(clamped_block(block, dims), first)
        return [row(states_ref.at[b, at, n, cols]) for n in range(nstate)]

    # Every thread's own column of these shared rows: no barrier between its writes and its reads.
    for n, h in enumerate(block_states(last)):
        g_s[n] = row(carries_ref.at[b, seg, n, cols])
        da_s[n] = zero
        a2_s[n] = row(a2_ref.at[n, cols])
        h_s[n] = h
    # Copies from shared to global memory a block issues: du, ddelta, dz, the dB and dC sums.
    stores = 3 + dims.has_z

    def block_step(indices, u_s, delta_s, dout_s, *tiles_and_carry):
        *tiles, (dd_acc, dbias_acc) = tiles_and_carry
        z_tiles = tiles[:1] if z_ref is not None else []
        b_s, c_s, *keep_tiles = tiles[len(z_tiles) :]
        (j,) = indices
        block = last - j  # the segment's blocks, last to first
        slot = j % 2
        plgpu.wait_smem_to_gmem(stores, wait_read_only=True)  # this slot's stores from two blocks ago have read it
        upcoming = block_states(block - 1)  # the next block's start states: their loads overlap this block
        raw_dt, dt, valid = zip(*(step_dt(delta_s, r, bias, block, dims) for r in range(steps)), strict=True)
        keep = [step_keep(keep_tiles[0], r, valid[r]) for r in range(steps)] if keep_tiles else None

        def masked(x, r):
            return x * valid[r]  # steps past L (zeros by TMA's bounds): no decay, no input, no gradient

        u, dy, silu_grad = [], [], []
        for r in range(steps):
            u.append(masked(plgpu.load(u_s.at[r], layout=layout).astype(f32), r))
            dout = masked(plgpu.load(dout_s.at[r], layout=layout).astype(f32), r)
            if z_tiles:
                zr = plgpu.load(z_tiles[0].at[r], layout=layout).astype(f32)
                sig = sigmoid(zr)
                dy.append(dout * zr * sig)
                silu_grad.append(dout * sig * (1.0 + zr * (1.0 - sig)))
            else:
                dy.append(dout)
        dtu = [dt[r] * u[r] for r in range(steps)]

        def state_step(rd, i, sums):
            """State n = rd * per_round + i of the block: its recompute and adjoint; its dB and dC terms go to rows
            i * steps + r and HALF_ROWS + i * steps + r of the sum tile."""
            n = rd * per_round + i
            y, sum_gb, sum_da = (list(x) for x in sums)
            a2 = plgpu.load(a2_s.at[n], layout=layout)
            h = plgpu.load(h_s.at[n], layout=layout)
            hs, decays = [h], []
            for r in range(steps):
                decay = jnp.exp2(dt[r] * a2)
                decays.append(decay if keep is None else keep[r] * decay)  # 0 where a packed sequence starts
                hs.append(decays[r] * hs[r] + dtu[r] * b_s[r, n].astype(f32))
                if z_tiles:
                    y[r] = y[r] + c_s[r, n].astype(f32) * hs[r + 1]
            adj = plgpu.load(g_s.at[n], layout=layout)
            da_n = zero
            for r in reversed(range(steps)):
                adj = adj + c_s[r, n].astype(f32) * dy[r]
                sum_gb[r] = sum_gb[r] + adj * b_s[r, n].astype(f32)
                da = adj * hs[r] * decays[r]
                sum_da[r] = sum_da[r] + da * (a2 * LN_2)
                da_n = da_n + da * dt[r]
                sum_bc[i * steps + r] = adj * dtu[r]
                sum_bc[HALF_ROWS + i * steps + r] = dy[r] * hs[r + 1]
                adj = decays[r] * adj
            g_s[n] = adj
            da_s[n] = plgpu.load(da_s.at[n], layout=layout) + da_n
            return tuple(y), tuple(sum_gb), tuple(sum_da)

        def round_step(rd, sums):
            """per_round states, then their dB and dC terms summed over the program's channels."""
            sums = lax.fori_loop(0, per_round, functools.partial(state_step, rd), sums, unroll=True)
            plgpu.commit_smem()  # every thread's rows of the sum tile written
            total = plgpu.load(sum_bc, layout=plgpu.Layout.WGMMA, optimized=False).sum(axis=1)
            sums_s.at[slot, pl.ds(rd * SUM_ROWS, SUM_ROWS)][...] = total
            plgpu.commit_smem()  # the sum tile read before the next round writes it
            return sums

        sums = tuple((zero,) * steps for _ in range(3))
        y, sum_gb, sum_da = lax.fori_loop(0, rounds, round_step, sums)
        for r in range(steps):
            du = dt[r] * sum_gb[r]
            ddt = u[r] * sum_gb[r] + sum_da[r]
            if dims.softplus:
                ddt = ddt * sigmoid(raw_dt[r])
            ddt = masked(ddt, r)
            if dv is not None:
                du = du + dv * dy[r]
                dd_acc = dd_acc + dy[r] * u[r]
            dbias_acc = dbias_acc + ddt
            du_s[slot, r] = du.astype(du_s.dtype)
            ddt_s[slot, r] = ddt.astype(ddt_s.dtype)
            if z_tiles:
                yr = y[r] if dv is None else y[r] + dv * u[r]
                dz_s[slot, r] = (yr * silu_grad[r]).astype(dz_s.dtype)
        for n in range(nstate):
            h_s[n] = upcoming[n]
        plgpu.commit_smem()  # every thread's rows of the outputs written

        def channel_target(ref):
            return lambda rows: ref.at[b, rows, cols]

        @pl.when(block < dims.nblocks)
        def _():
            outputs = [(du_s, du_ref), (ddt_s, ddelta_ref)] + ([(dz_s, dz_ref)] if z_tiles else [])
            for tile, ref in outputs:
                store_steps(tile.at[slot], channel_target(ref), block, steps, dims.seqlen)
            block_sums = pl.ds(block * rounds * SUM_ROWS, rounds * SUM_ROWS)
            plgpu.copy_smem_to_gmem(sums_s.at[slot], dbc_ref.at[b, g, k, block_sums])

        return dd_acc, dbias_acc

    channels = [u_ref.at[b], delta_ref.at[b], dout_ref.at[b]] + ([z_ref.at[b]] if z_ref is not None else [])
    states = [b_ref.at[b, :, g], c_ref.at[b, :, g]] + ([keep_ref.at[b]] if keep_ref is not None else [])
    dd_acc, dbias_acc = walk_segment(block_step, dims, lambda j: last - j, channels, states, blk, (zero, zero))
    for n in range(nstate):
        da_ref.at[b, seg, n, cols][...] = plgpu.load(da_s.at[n], layout=layout)
    if dd_ref is not None:
        dd_ref.at[b, seg, cols][...] = dd_acc
    if dbias_ref is not None:
        dbias_ref.at[b, seg, cols][...] = dbias_acc
    plgpu.wait_smem_to_gmem(0)


def scan_backward(u, delta, a2, B, C, D, z, delta_bias, states, dout, carries, keep, dims: MosaicScanDims):
    """Gradients of (u, delta, A, B, C, D, z, delta_bias) from the states before every block (batch, L / block_l,
    N, dim + 1) float32, dout in u's dtype and the adjoint carried into every segment's last step (batch, segments,
    N, dim + 1) float32: d last_state for the last segment (``segment_adjoints`` composed for the others); ``keep``
    the packed sequences' keep mask (batch, L, KEEP_LANES) where ``dims.has_keep``.

    Returns du, ddelta, dz in their inputs' dtypes and float32 partials: dB, dC (batch, L, G, dim / G / 128, N),
    dA (batch, segments, N, dim), dD and d delta_bias (batch, segments, dim); None for absent inputs.
    """
    f32 = jnp.float32
    batch, seqlen, dim = u.shape
    nseg = dims.nsegments
    inputs = [u, delta, a2, B, C, states, dout, carries]
    inputs += [x.astype(f32) if x is D else x for x in (D, z) if x is not None]
    if delta_bias is not None:
        inputs.append(delta_bias.astype(f32))
    inputs += [keep] if dims.has_keep else []
    rounds = sum_rounds(dims)
    partial_bc = (batch, dims.groups, dims.blocks_per_group, dims.nblocks * rounds * SUM_ROWS)
    out_type = [
        jax.ShapeDtypeStruct(u.shape, u.dtype),
        jax.ShapeDtypeStruct(delta.shape, delta.dtype),
        jax.ShapeDtypeStruct(partial_bc, f32),
        jax.ShapeDtypeStruct((batch, nseg, dims.dstate, dim), f32),
    ]
    if z is not None:
        out_type.append(jax.ShapeDtypeStruct(z.shape, z.dtype))
    out_type += [jax.ShapeDtypeStruct((batch, nseg, dim), f32) for x in (D, delta_bias) if x is not None]
    tile = (2, dims.block_l, LANES)
    # each slot's sums leave by TMA from its start: a slot of whole 128-byte rows (rounds of 64 floats) starts on one
    sums = jax.ShapeDtypeStruct((2, rounds * SUM_ROWS), f32)
    check_tma_slots([sums], [sums.shape[-1:]])
    scratch = [
        plgpu.SMEM((dims.dstate, LANES), f32),  # the adjoint g
        plgpu.SMEM((dims.dstate, LANES), f32),  # dA sums
        plgpu.SMEM((dims.dstate, LANES), f32),  # A2's rows of the program's channels
        plgpu.SMEM((dims.dstate, LANES), f32),  # the state before the block being walked
        plgpu.SMEM(tile, u.dtype),
        plgpu.SMEM(tile, delta.dtype),
        plgpu.SMEM(tile, u.dtype if z is None else z.dtype),
        plgpu.SMEM((SUM_ROWS, LANES), f32),  # dB, then dC terms of a round's states and the block's steps, a row each
        plgpu.SMEM(sums.shape, f32),  # their sums over the program's channels, per pipeline slot
    ]
    results = call_kernel(
        functools.partial(_bwd_kernel, dims=dims),
        inputs,
        out_type=out_type,
        scratch=scratch,
        grid=(batch, dim // LANES, nseg),
        grid_names=("batch", "channels", "segments"),
        name="selective_scan_bwd",
        interpret=dims.interpret,
    )
    du, ddelta, dbc, dA, *rest = results
    dz = rest.pop(0) if z is not None else None
    dD = rest.pop(0) if D is not None else None
    dbias = rest.pop(0) if delta_bias is not None else None
    per_round = states_per_round(dims)
    rows = (batch, dims.groups, dims.blocks_per_group, dims.nblocks, rounds, 2, HALF_ROWS)
    dbc = dbc.reshape(rows)[..., : per_round * dims.block_l]
    blocks = (batch, dims.groups, dims.blocks_per_group, dims.nblocks, dims.dstate, dims.block_l)
    dB, dC = (_steps_first(dbc[..., i, :].reshape(blocks), seqlen) for i in (0, 1))
    return du, ddelta, dz, dB, dC, dA, dD, dbias


def _steps_first(x: jax.Array, seqlen: int) -> jax.Array:
    """Partials (batch, G, blocks per group, L / block_l, N, block_l) -> (batch, L, G, blocks per group, N)."""
    batch, groups, per_group, nblocks, nstate, block_l = x.shape
    x = jnp.transpose(x, (0, 3, 5, 1, 2, 4)).reshape(batch, nblocks * block_l, groups, per_group, nstate)
    return x[:, :seqlen]
