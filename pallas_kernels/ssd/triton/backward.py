"""Backward Pallas kernels of the chunked SSD: a sequential pass for the state gradients, then every other
gradient block-parallel (programs launched head and head dims fastest: see ``block.block_program``).

1. ``ssd_bwd_dstates``, grid (batch, H, headdim blocks x state-column blocks): walks the blocks last to first
   carrying dS, its (block_p, Nb) tile of the float32 gradient of the state leaving the block, and stores it per
   block (in the dot dtype), then d initial_states. Per block: dS ← carry dS + (from_start ∘ dy)ᵀ C, with
   dy = dout silu(z).
2. ``ssd_bwd_dx``, one program per (batch row, block, head, ``bwd_block_p`` head dims), no carry; with the
   block's incoming state S (saved by the forward), the gradient dS of its outgoing state, M = C·Bᵀ ∘ decay and
   X = dt x:

    dX  = Mᵀ dy + to_end ∘ (B dSᵀ)              dx = dt dX + D dy,  dD = Σ_l dy x
    d cs from the intra-block term (row minus column sums of dM ∘ M below its diagonal, dM = dy Xᵀ: see
    below), the incoming state's term
    (dy · its output) and the state update; d(dt A) is the reverse cumulative sum of d cs, giving ddt, dA and
    d dt_bias; dz from the saved pre-gate output. d cs sums over head dims and is linear in dM, dy and dS, so
    programs that split a head's dims store partial ddt, dA and d dt_bias (float32), which XLA sums. A split costs
    one more C·Bᵀ and decay per block and head and halves the (T, head dims) and state tiles a program holds.
    With ``bwd_rowwise_dcs`` the intra-block term comes from row sums only: dy · (M X) and X · (Mᵀ dy) are W's row
    and column sums, so no dM and no (T, T) reduction (``_dcs_rowwise``).
    M's diagonal (C·Bᵀ's own, decay exp(0) = 1; from ``block_scores`` or the block's B and C) enters Mᵀ dy for dX
    only: in d cs a diagonal entry adds the same value to its row's sum and its column's, which cancel exactly but
    leave their rounding. At large decays, where the entries below are tiny, that rounding would be most of d cs, and
    the reverse cumulative sum would carry it into d dt and dA (a module test at TEST_SEED=32: d A_log 2.16e-4 from a
    float64 truth with the diagonal in, 3.7e-6 without; the reference at chunk 64, 4.2e-5).

3. ``ssd_bwd_dbc``, one program per (batch row, block, group, split): a program loops over its share (1 / splits)
   of the group's heads, summing in registers

    dCB = Σ_heads dM ∘ decay,   dC = dCB B + Σ_heads from_start ∘ (dy S),   dB = dCBᵀ C + Σ_heads to_end ∘ (X dS)

With ``SsdConfig.bwd_dx_mosaic`` (``default_config`` sets it on Hopper GPUs) step 2 runs on Mosaic GPU instead
where that kernel covers the shape (``mosaic_gpu.backward_dx``): the same math from shared memory and ``wgmma``, about
twice as fast as the Triton kernel at 130m and at L 65536 on an H100, and recomputing the pre-gate output that the
Triton kernel reads (``dx_on_mosaic``: the forward then leaves it out). With ``SsdConfig.bwd_dbc_mosaic``
(``default_config`` sets it on Hopper GPUs up to N 128, P 64) step 3 does too (``mosaic_gpu.backward_dbc``): the group's
heads pipelined through shared memory, their state products accumulated by ``wgmma``, 26% less time than the Triton
kernel at L 65536 on an H100. dB and dC then leave in B's dtype, with no partials.

Two kernels rather than one: together they hold too many tiles for the register file (the fused version spilled at
the 255-register cap), and the per-head kernel has H times more programs to hide latency with. dB and dC leave as
one float32 partial per (group, split); these, and dA, d dt_bias and dD per block, are summed by XLA in a fixed
order, so the result is deterministic.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._triton import sigmoid
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.triton.block import (
    Block,
    Program,
    block_program,
    block_scores,
    call_kernel,
    mm,
    optional_refs,
    segment_block,
    segment_program,
    segment_tiles,
    sequential_program,
)
from pallas_kernels.ssd.triton.segments import segment_outputs


def _reverse_cumsum(v: jax.Array) -> jax.Array:
    """r_s = sum_{l >= s} v_l."""
    return jnp.sum(v) - jnp.cumsum(v) + v


def _gated_dout(prog: Program, t0, dout_ref, z_ref, ypre_ref=None, dz_ref=None) -> jax.Array:
    """dy = dout silu(z) (dout without z), float32; stores dz = dout ypre silu'(z) when given its refs."""
    dy = prog.load_heads(dout_ref, t0).astype(jnp.float32)
    if z_ref is None:
        return dy
    z = prog.load_heads(z_ref, t0).astype(jnp.float32)
    sz = sigmoid(z, prog.dims.interpret)
    if dz_ref is not None:
        ypre = prog.load_heads(ypre_ref, t0).astype(jnp.float32)
        prog.store_heads(dz_ref, t0, dy * ypre * sz * (1.0 + z * (1.0 - sz)))
    return dy * z * sz


def _dstates_block(prog: Program, t0, dS, dt_ref, C_ref, dout_ref, z_ref, A, bias, seq_ref):
    """The gradient of the state entering the block at ``t0`` from that of the state leaving it, and the block's
    carry: dS ← carry dS + (from_start ∘ dy)ᵀ C."""
    blk = prog.block(t0, dt_ref, A, bias, seq_ref, intra=False)
    dy = _gated_dout(prog, t0, dout_ref, z_ref)
    fs_dy = (blk.from_start[:, None] * dy).astype(C_ref.dtype)
    return blk.carry * dS + mm(fs_dy, prog.load_group(C_ref, t0), trans_a=True), blk.carry


def _dstates_kernel(dt_ref, A_ref, C_ref, dout_ref, dfinal_ref, *refs, dims: SsdDims):
    (z_ref, bias_ref, seq_ref), (dstates_ref, *dinit) = optional_refs(refs, (dims.has_z, dims.has_bias, dims.has_seq))
    prog = sequential_program(dims)
    A = A_ref[prog.h]
    bias = bias_ref[prog.h] if bias_ref is not None else None

    def step(i, dS):
        k = dims.nblocks - 1 - i
        prog.store_state(dstates_ref, dS, prog.b, k, prog.h)
        return _dstates_block(prog, k * dims.block_l, dS, dt_ref, C_ref, dout_ref, z_ref, A, bias, seq_ref)[0]

    dS = jax.lax.fori_loop(0, dims.nblocks, step, prog.load_state(dfinal_ref, prog.b, prog.h).astype(jnp.float32))
    if dinit:
        prog.store_state(dinit[0], dS, prog.b, prog.h)


def _dstates_segment_kernel(dt_ref, A_ref, C_ref, dout_ref, *refs, dims: SsdDims, expand: bool):
    """Grid ``segment_tiles(dims)`` (``segment_program``): ``ssd_bwd_dstates``'s walk over one segment, last block
    first. ``expand``: from the gradient of the state leaving the segment, storing each block's (the two-level
    backward's last level). Otherwise from zero, storing only the gradient the segment's own outputs give the state
    entering it (float32) and the segment's decay."""
    flags = (dims.has_z, dims.has_bias, dims.has_seq, expand)
    (z_ref, bias_ref, seq_ref, ends_ref), outs = optional_refs(refs, flags)
    prog, segment = segment_program(dims)
    A = A_ref[prog.h]
    bias = bias_ref[prog.h] if bias_ref is not None else None
    start = prog.state_or_zeros(ends_ref, prog.b, segment, prog.h)

    def step(i, carry):
        dS, decay = carry
        k, inside, t0 = segment_block(dims, segment, i, reverse=True)  # past the end: dS stays
        if expand:
            prog.store_state(outs[0], dS, prog.b, k, prog.h, when=inside)
        new, carry = _dstates_block(prog, t0, dS, dt_ref, C_ref, dout_ref, z_ref, A, bias, seq_ref)
        return jnp.where(inside, new, dS), jnp.where(inside, decay * carry, decay)

    dS, decay = jax.lax.fori_loop(0, dims.keep_blocks, step, (start, jnp.float32(1.0)))
    if not expand:
        local_ref, decay_ref = outs
        prog.store_state(local_ref, dS, prog.b, segment, prog.h)
        decay_ref[prog.b, segment, prog.h] = decay


def dstates_pass(dt, A, C, dout, dfinal, z, dt_bias, seq_idx, states, initial_states, dims: SsdDims, config):
    """``ssd_bwd_dstates``, the one-level pass: the block state gradients (like ``states``) and a list holding d
    initial_states (batch, H, P, N) float32 where ``initial_states`` is given, else empty."""
    batch, _, nheads, headdim = dout.shape
    state_shape = jax.ShapeDtypeStruct((batch, nheads, headdim, dims.dstate), jnp.float32)
    sdims = dims.with_state_tiles(config.state_block_p, config.state_block_n)
    inputs = [dt, A, C, dout, dfinal] + [t for t in (z, dt_bias, seq_idx) if t is not None]
    shapes = [jax.ShapeDtypeStruct(states.shape, states.dtype)]
    shapes += [state_shape] if initial_states is not None else []
    dstates, *dinit = call_kernel(
        functools.partial(_dstates_kernel, dims=sdims),
        inputs,
        shapes,
        sdims.grid,
        sdims,
        config.state_num_warps,
        config.bwd_num_stages,
        "ssd_bwd_dstates",
    )
    return dstates, dinit


def segment_dstates(dt, A, C, dout, z, dt_bias, seq_idx, dims: SsdDims, config):
    """``ssd_bwd_segment_dstates``: every segment's own contribution to the gradient of the state entering it (from
    a zero end) and its decay (``segments.segment_outputs``), all segments in parallel."""
    sdims = dims.with_state_tiles(config.rebuild_block_p, config.state_block_n)
    grid = (segment_tiles(sdims),)
    inputs = [dt, A, C, dout] + [t for t in (z, dt_bias, seq_idx) if t is not None]
    warps, stages = config.state_num_warps, config.bwd_num_stages
    local_kernel = functools.partial(_dstates_segment_kernel, dims=sdims, expand=False)
    outputs = segment_outputs(dims)
    local, decay = call_kernel(local_kernel, inputs, outputs, grid, sdims, warps, stages, "ssd_bwd_segment_dstates")
    return local, decay


def block_dstates(dt, A, C, dout, z, dt_bias, seq_idx, ends, states, dims: SsdDims, config):
    """``ssd_bwd_block_dstates``: every block's state gradient (like ``states``) from the gradient of the state
    leaving its segment (``ends``), all segments in parallel."""
    sdims = dims.with_state_tiles(config.rebuild_block_p, config.state_block_n)
    grid = (segment_tiles(sdims),)
    inputs = [dt, A, C, dout] + [t for t in (z, dt_bias, seq_idx) if t is not None]
    warps, stages = config.state_num_warps, config.bwd_num_stages
    expand_kernel = functools.partial(_dstates_segment_kernel, dims=sdims, expand=True)
    shape = jax.ShapeDtypeStruct(states.shape, states.dtype)
    name = "ssd_bwd_block_dstates"
    (dstates,) = call_kernel(expand_kernel, [*inputs, ends], [shape], grid, sdims, warps, stages, name)
    return dstates


def _head_inputs(prog: Program, k, ins, opt, dz_ref=None, below: bool = False):
    """One head's block: its decays, x32, dy, X = dt x (float32) and the block's incoming state and the gradient of
    its outgoing state (dot dtype). ``ins`` = (x, dt, A, states, dstates, dout) refs, ``opt`` = (z, dt_bias, seq_idx,
    ypre) refs or None; dz is stored when ``dz_ref`` is given; ``below``: the intra-block decays strictly below the
    diagonal (``Program.block``)."""
    x_ref, dt_ref, A_ref, states_ref, dstates_ref, dout_ref = ins
    z_ref, bias_ref, seq_ref, ypre_ref = opt
    t0 = k * prog.dims.block_l
    bias = bias_ref[prog.h] if bias_ref is not None else None
    blk = prog.block(t0, dt_ref, A_ref[prog.h], bias, seq_ref, below=below)
    x32 = prog.load_heads(x_ref, t0).astype(jnp.float32)
    dy = _gated_dout(prog, t0, dout_ref, z_ref, ypre_ref, dz_ref)
    S_in = prog.load_state(states_ref, prog.b, k, prog.h)
    dS = prog.load_state(dstates_ref, prog.b, k, prog.h)
    return blk, x32, dy, x32 * blk.dt[:, None], S_in, dS


def _dx_kernel(*refs, dims: SsdDims, rowwise: bool):
    """One program per (batch row, block, head, head-dim block)."""
    _dx_tile(*block_program(dims), refs=refs, dims=dims, rowwise=rowwise)


def _dx_tile(prog: Program, k, *, refs, dims: SsdDims, rowwise: bool):
    """The per-head gradients of block ``k`` for ``prog``'s batch row, head and head dims; d cs by ``_dcs_rowwise``
    or ``_dcs_by_tile_sums`` (``SsdConfig.bwd_rowwise_dcs``)."""
    x_ref, dt_ref, A_ref, B_ref, C_ref, states_ref, dstates_ref, dout_ref, *rest = refs
    flags = (dims.has_D, dims.has_z, dims.has_bias, dims.has_seq, dims.has_z, dims.has_scores, dims.has_scores)
    (D_ref, z_ref, bias_ref, seq_ref, ypre_ref, scores_ref, diag_ref), outs = optional_refs(rest, flags)
    dx_ref, ddt_ref, dA_ref, *opt_outs = outs
    (dD_ref, dz_ref, dbias_ref), _ = optional_refs(opt_outs, (dims.has_D, dims.has_z, dims.has_bias))
    b, h, t0, part = prog.b, prog.h, k * dims.block_l, prog.p0 // dims.block_p
    f32 = jnp.float32
    mm_dtype = x_ref.dtype
    ins = (x_ref, dt_ref, A_ref, states_ref, dstates_ref, dout_ref)
    blk, x32, dy, X, S_in, dS = _head_inputs(prog, k, ins, (z_ref, bias_ref, seq_ref, ypre_ref), dz_ref, below=True)
    Bm = prog.load_group(B_ref, t0)
    Cm = prog.load_group(C_ref, t0)
    dy_mm = dy.astype(mm_dtype)

    if scores_ref is not None:
        CB = prog.load_scores(scores_ref, k)
    else:
        CB = mm(Cm, Bm, trans_b=True)
    M_below = CB * blk.intra  # strictly below the diagonal (the module docstring says why)
    if diag_ref is not None:
        M_diag = prog.load_scores_diagonal(diag_ref, k)
    else:
        M_diag = jnp.sum(Cm.astype(f32) * Bm.astype(f32), axis=1)
    M_below_mm = M_below.astype(mm_dtype)
    dM = None if rowwise else mm(dy_mm, X.astype(mm_dtype), trans_b=True)
    BdS = mm(Bm, dS, trans_b=True)
    M_dy_below = mm(M_below_mm, dy_mm, trans_a=True)
    # Mᵀ dy: its diagonal term added as the dot would (both factors rounded to the dot dtype, exact product)
    M_dy = M_dy_below + M_diag.astype(mm_dtype).astype(f32)[:, None] * dy_mm.astype(f32)
    dX = M_dy + blk.to_end[:, None] * BdS
    dx = blk.dt[:, None] * dX
    if D_ref is not None:
        dx = dx + prog.load_head_dims(D_ref)[None, :] * dy
        plgpu.store(dD_ref.at[b, k, h, pl.ds(prog.p0, dims.block_p)], jnp.sum(dy * x32, axis=0), mask=prog.pmask)
    prog.store_heads(dx_ref, t0, dx)

    W = None if rowwise else dM * M_below
    y_in = blk.from_start[:, None] * mm(Cm, S_in, trans_b=True)
    if rowwise:
        dcs, q_sum = _dcs_rowwise(blk, M_below_mm, X, y_in, dy, dy_mm, M_dy_below, BdS)
    else:
        dcs, q_sum = _dcs_by_tile_sums(blk, W, X, y_in, dy, BdS)
    SdS = jnp.sum(dS.astype(f32) * S_in.astype(f32))
    last_extra = blk.carry * SdS + q_sum
    dcs = dcs + jnp.where(prog.rows == dims.block_l - 1, last_extra, 0.0)
    da = _reverse_cumsum(dcs)
    ddt = prog.dt_grad(blk, jnp.sum(x32 * dX, axis=1) + da * A_ref[h])
    prog.store_time(ddt_ref, t0, ddt, part)
    dA_ref[b, k, h, part] = jnp.sum(da * blk.dt)
    if dbias_ref is not None:
        dbias_ref[b, k, h, part] = jnp.sum(ddt)


def _dcs_by_tile_sums(blk: Block, W, X, y_in, dy, BdS):
    """d cs of the block's outputs and of the state update's to_end (the state's carry aside), and the sum of the
    to_end terms q, which the last position's d cs gets back: with W = dM ∘ M (dM = dy Xᵀ), the row minus column sums
    of W, plus dy · y_in, minus q = to_end (X · B dSᵀ)."""
    q = blk.to_end * jnp.sum(X * BdS, axis=1)
    return jnp.sum(W, axis=1) - jnp.sum(W, axis=0) + jnp.sum(dy * y_in, axis=1) - q, jnp.sum(q)


def _dcs_rowwise(blk: Block, M_mm, X, y_in, dy, dy_mm, M_dy, BdS):
    """``_dcs_by_tile_sums`` without (T, T) sums: W's row sums are dy · (M X) and its column sums X · (Mᵀ dy) (``M_dy``,
    dX's first term), so d cs = dy · (M X + y_in) - (X · Mᵀ dy + q). One (T, T) x (T, P) product replaces dy Xᵀ and
    no (T, T) tile is summed. Both W sums take M, X and dy as the dots round them, so that over the block they
    cancel as W's own row and column sums do (with dy in float32 on one side, bf16 dA drifted 3x further)."""
    f32 = jnp.float32
    X_mm = X.astype(M_mm.dtype)
    outputs = dy_mm.astype(f32) * mm(M_mm, X_mm) + dy * y_in
    to_end_terms = blk.to_end[:, None] * X * BdS
    inputs = X_mm.astype(f32) * M_dy + to_end_terms
    return jnp.sum(outputs, axis=1) - jnp.sum(inputs, axis=1), jnp.sum(to_end_terms)


def _dbc_kernel(x_ref, dt_ref, A_ref, B_ref, C_ref, states_ref, dstates_ref, dout_ref, *refs, dims: SsdDims, splits):
    (z_ref, bias_ref, seq_ref), (dB_ref, dC_ref) = optional_refs(refs, (dims.has_z, dims.has_bias, dims.has_seq))
    pid = pl.program_id(0)  # splits fastest, then groups, then (batch row, block): a block's programs run together
    split, rest = pid % splits, pid // splits
    g, bk = rest % dims.ngroups, rest // dims.ngroups
    b, k = bk // dims.nblocks, bk % dims.nblocks
    heads = dims.heads_per_group // splits  # this program's heads: first_head + [0, heads)
    first_head = g * dims.heads_per_group + split * heads
    t0 = k * dims.block_l
    f32 = jnp.float32
    mm_dtype = x_ref.dtype
    ins = (x_ref, dt_ref, A_ref, states_ref, dstates_ref, dout_ref)

    def head(j, acc):
        """One head's share of the group's dCB = Σ dM ∘ decay, dC and dB."""
        dCB, dB, dC = acc
        prog = Program(dims, b=b, h=first_head + j)
        blk, _, dy, X, S_in, dS = _head_inputs(prog, k, ins, (z_ref, bias_ref, seq_ref, None))
        dy_mm = dy.astype(mm_dtype)
        X_mm = X.astype(mm_dtype)
        dCB = dCB + mm(dy_mm, X_mm, trans_b=True) * blk.intra
        dC = dC + blk.from_start[:, None] * mm(dy_mm, S_in)
        dB = dB + blk.to_end[:, None] * mm(X_mm, dS)
        return dCB, dB, dC

    tile = jnp.zeros((dims.block_l, dims.np_), f32)
    dCB, dB, dC = jax.lax.fori_loop(0, heads, head, (jnp.zeros((dims.block_l, dims.block_l), f32), tile, tile))
    group = Program(dims, b=b, h=first_head)
    dCB = dCB.astype(mm_dtype)
    slot = g * splits + split
    group.store_group(dC_ref, t0, dC + mm(dCB, group.load_group(B_ref, t0)), slot)
    group.store_group(dB_ref, t0, dB + mm(dCB, group.load_group(C_ref, t0), trans_a=True), slot)


def head_splits(heads_per_group: int, most: int) -> int:
    """The largest divisor of heads_per_group that is <= most: how many programs share a group's heads."""
    return max(d for d in range(1, min(most, heads_per_group) + 1) if heads_per_group % d == 0)


def dx(tensors, D, z, dt_bias, seq_idx, ypre, dims: SsdDims, config):
    """``ssd_bwd_dx``: dx, ddt, dA, dD or None, dz or None, d dt_bias or None. ``dims`` has whole heads; the kernel
    splits them by ``config.bwd_block_p``."""
    x, dt, B, C = tensors[0], tensors[1], tensors[3], tensors[4]
    batch, _, nheads, headdim = x.shape
    f32 = jnp.float32
    scores = block_scores(B, C, dims.block_l) if dims.has_scores else None
    diagonal = None if scores is None else jnp.diagonal(scores, axis1=3, axis2=4)  # (batch, nblocks, G, T)
    xdims = dims.with_block_p(config.bwd_block_p)
    parts = xdims.p_blocks  # programs per head; > 1: ddt, dA, d dt_bias leave as float32 partials
    per_block = jax.ShapeDtypeStruct((batch, dims.nblocks, nheads, parts), f32)
    optional_outs = [
        (D is not None, jax.ShapeDtypeStruct((batch, dims.nblocks, nheads, headdim), f32)),
        (z is not None, jax.ShapeDtypeStruct(x.shape, x.dtype)),
        (dt_bias is not None, per_block),
    ]
    ddt_shape = jax.ShapeDtypeStruct((*dt.shape, parts), dt.dtype if parts == 1 else f32)
    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype), ddt_shape, per_block]
    shapes += [shape for flag, shape in optional_outs if flag]
    dx, ddt, dA, *rest = call_kernel(
        functools.partial(_dx_kernel, dims=xdims, rowwise=config.bwd_rowwise_dcs),
        tensors + [t for t in (D, z, dt_bias, seq_idx, ypre, scores, diagonal) if t is not None],
        shapes,
        xdims.block_grid,
        xdims,
        config.bwd_num_warps,
        config.bwd_num_stages,
        "ssd_bwd_dx",
    )
    (dD, dz, dbias), _ = optional_refs(rest, [flag for flag, _ in optional_outs])
    ddt = ddt.sum(axis=-1).astype(dt.dtype)
    dA = dA.sum(axis=-1)
    dbias = None if dbias is None else dbias.sum(axis=-1)
    return dx, ddt, dA, dD, dz, dbias


def dbc(tensors, z, dt_bias, seq_idx, dims: SsdDims, config):
    """``ssd_bwd_dbc``: dB and dC, float32 partials per (group, split) or, with one split, in B's and C's dtypes."""
    x, B, C = tensors[0], tensors[3], tensors[4]
    batch, seqlen = x.shape[:2]
    f32 = jnp.float32
    splits = head_splits(dims.heads_per_group, config.bwd_head_splits)
    # float32 partials where several programs share a group's heads (XLA sums them); else dB and dC themselves, in
    # B's and C's dtypes (the same rounding as that sum's cast, without a 66 us float32 round trip at B2 L8192 N256)
    partial_bc = [
        jax.ShapeDtypeStruct((batch, seqlen, dims.ngroups * splits, dims.dstate), f32 if splits > 1 else t.dtype)
        for t in (B, C)
    ]
    dB, dC = call_kernel(
        functools.partial(_dbc_kernel, dims=dims, splits=splits),
        tensors + [t for t in (z, dt_bias, seq_idx) if t is not None],
        partial_bc,
        (batch * dims.nblocks * dims.ngroups * splits,),
        dims,
        config.dbc_num_warps,
        config.bwd_num_stages,
        "ssd_bwd_dbc",
    )
    return dB, dC
