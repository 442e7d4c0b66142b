"""Forward Pallas kernels of the chunked SSD: out, the final state and (for the backward) the block-start states.

Two ways, the fused one when L <= ``SsdConfig.fused_forward_max_l``:
  - split: a sequential state pass (grid (batch, H, headdim blocks x state-column blocks): each program walks L
    in blocks of T carrying its (block_p, Nb) tile of the float32 state and stores every block's incoming state),
    then a block-parallel output pass (one program per batch row, block, head and headdim block, launched head
    fastest: ``block.block_program``) that needs no carry;
  - fused: one sequential pass that also computes the output as it walks (no states stored unless saving). It
    has batch x H x headdim-blocks programs, each walking all L / T blocks: faster while that fills the GPU and the
    walk is short (mamba2-130m and 2.7b layers at L 2048 on an H100: 0.19 vs 0.27 ms and 0.37 vs 0.48 ms), slower
    at long L with few programs, where the split form's block-parallel pass does most of the work.
With two-level state passes (``SsdConfig.two_level_states``) the split form's state pass gives each segment's
incoming state; ``SsdConfig.fused_segments`` then runs the fused walk once per segment, all segments in parallel
(``ssd_fwd_fused_segments``), instead of writing every block's state (``ssd_fwd_block_states``) for the output
pass to read back.
With ``SsdConfig.fwd_mosaic`` (the default on Hopper) both fused walks run on Mosaic GPU (``mosaic_gpu.forward``)
where it covers the shape; a whole walk that keeps float32 states every few blocks for the backward runs per segment
of them there (the two-level state pass's segment states, then the Mosaic walk once per segment).
Per block, on tensor cores: C·Bᵀ (T, T), masked decays, y = (C·Bᵀ ∘ decay ∘ dt) x plus the incoming state's term
exp(cs) C·stateᵀ; the state update is a (block_p, T) x (T, Np) dot. Dot operands are in the input dtype (bf16 in
training), accumulation float32; the stored states are in the dot dtype, as the dots read them. With z and saving
for the backward, the output before the gate is stored too where the backward's per-head kernel reads it (on Triton:
the Mosaic GPU one recomputes it, ``dispatch.dx_on_mosaic``).
"""

import functools

import jax
import jax.numpy as jnp

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

_FLAGS = ("has_D", "has_z", "has_bias", "has_init", "has_seq", "has_scores")


def _flags(dims: SsdDims) -> tuple[bool, ...]:
    return tuple(getattr(dims, name) for name in _FLAGS)


def _next_state(blk: Block, state, x, Bm):
    """The state leaving the block: carry x incoming + sum_s to_end_s dt_s x_s ⊗ B_s."""
    weighted = x.astype(jnp.float32) * (blk.to_end * blk.dt)[:, None]
    return blk.carry * state + mm(weighted.astype(x.dtype), Bm, trans_a=True)


def _pass_block(prog: Program, t0, state, x_ref, dt_ref, B_ref, A, bias, seq_ref):
    """The state leaving the block at ``t0`` in a state pass (no output), and the block's carry (the decay of the
    state entering it): the block's decays, then the update."""
    blk = prog.block(t0, dt_ref, A, bias, seq_ref, intra=False)
    return _next_state(blk, state, prog.load_heads(x_ref, t0), prog.load_group(B_ref, t0)), blk.carry


def _block_output(prog: Program, blk: Block, t0, x, CB, Cm, state_mm, Dv, z_ref, out_ref, ypre_ref, when=None) -> None:
    """y = (C·Bᵀ ∘ decay ∘ dt) x + exp(cs) C·stateᵀ + D x, stored before (ypre) and after the z gate (only ``when``,
    a traced bool, holds, if given); ``CB`` is the block's (T, T) float32 C·Bᵀ."""
    scores = CB * blk.intra * blk.dt[None, :]
    y = mm(scores.astype(x.dtype), x) + blk.from_start[:, None] * mm(Cm, state_mm, trans_b=True)
    if Dv is not None:
        y = y + x.astype(jnp.float32) * Dv[None, :]
    if z_ref is not None:
        if ypre_ref is not None:
            prog.store_heads(ypre_ref, t0, y, when)
        z = prog.load_heads(z_ref, t0).astype(jnp.float32)
        y = y * z * sigmoid(z, prog.dims.interpret)
    prog.store_heads(out_ref, t0, y, when)


def _fused_block(prog: Program, k, t0, state, ins, opt, out_ref, ypre_ref, when=None):
    """One block of a fused walk: its output from the float32 ``state`` entering it (stored only ``when`` holds,
    if given), and the state leaving it. ``ins`` = (x, dt, B, C) refs, ``opt`` = (A, dt_bias or None, D's head dims
    or None, z, seq_idx, scores refs or None)."""
    x_ref, dt_ref, B_ref, C_ref = ins
    A, bias, Dv, z_ref, seq_ref, scores_ref = opt
    blk = prog.block(t0, dt_ref, A, bias, seq_ref)
    x = prog.load_heads(x_ref, t0)
    Bm = prog.load_group(B_ref, t0)
    Cm = prog.load_group(C_ref, t0)
    CB = prog.load_scores(scores_ref, k) if scores_ref is not None else mm(Cm, Bm, trans_b=True)
    _block_output(prog, blk, t0, x, CB, Cm, state.astype(x.dtype), Dv, z_ref, out_ref, ypre_ref, when)
    return _next_state(blk, state, x, Bm)


def _fused_kernel(x_ref, dt_ref, A_ref, B_ref, C_ref, *refs, dims: SsdDims, save: bool):
    (D_ref, z_ref, bias_ref, init_ref, seq_ref, scores_ref), outs = optional_refs(refs, _flags(dims))
    out_ref, final_ref, *saved = outs
    prog = sequential_program(dims)
    A = A_ref[prog.h]
    bias = bias_ref[prog.h] if bias_ref is not None else None
    Dv = prog.load_head_dims(D_ref) if D_ref is not None else None
    ypre_ref = saved[-1] if len(saved) > int(save) else None  # the pre-gate output comes last, if saved

    ins, opt = (x_ref, dt_ref, B_ref, C_ref), (A, bias, Dv, z_ref, seq_ref, scores_ref)

    def step(k, state):
        if save:
            prog.keep_state(saved[0], state, k)
        return _fused_block(prog, k, k * dims.block_l, state, ins, opt, out_ref, ypre_ref)

    state = jax.lax.fori_loop(0, dims.nblocks, step, prog.state_or_zeros(init_ref, prog.b, prog.h))
    prog.store_state(final_ref, state, prog.b, prog.h)


def _fused_segment_kernel(x_ref, dt_ref, A_ref, B_ref, C_ref, starts_ref, *refs, dims: SsdDims, store_blocks: bool):
    """Grid ``segment_tiles(dims)`` (``segment_program``): the fused walk over one segment of ``keep_blocks`` blocks
    from the float32 state entering it (the forward's segment walk), storing every block's output and, with
    ``store_blocks``, its incoming state in the dot dtype (what the backward keeps when every block's is kept)."""
    flags = (dims.has_D, dims.has_z, dims.has_bias, dims.has_seq, dims.has_scores)
    (D_ref, z_ref, bias_ref, seq_ref, scores_ref), (out_ref, *saved) = optional_refs(refs, flags)
    prog, segment = segment_program(dims)
    bias = bias_ref[prog.h] if bias_ref is not None else None
    Dv = prog.load_head_dims(D_ref) if D_ref is not None else None
    ypre_ref = saved[-1] if len(saved) > int(store_blocks) else None  # the pre-gate output comes last, if saved
    ins, opt = (x_ref, dt_ref, B_ref, C_ref), (A_ref[prog.h], bias, Dv, z_ref, seq_ref, scores_ref)

    def step(j, state):
        k, inside, t0 = segment_block(dims, segment, j)  # past the end: nothing stored, the state never read
        if store_blocks:
            prog.store_state(saved[0], state, prog.b, k, prog.h, when=inside)
        return _fused_block(prog, jnp.minimum(k, dims.nblocks - 1), t0, state, ins, opt, out_ref, ypre_ref, inside)

    jax.lax.fori_loop(0, dims.keep_blocks, step, prog.state_or_zeros(starts_ref, prog.b, segment, prog.h))


def _states_kernel(x_ref, dt_ref, A_ref, B_ref, *refs, dims: SsdDims, keep: bool):
    (bias_ref, init_ref, seq_ref), (states_ref, final_ref, *kept) = optional_refs(
        refs, (dims.has_bias, dims.has_init, dims.has_seq)
    )
    prog = sequential_program(dims)
    A = A_ref[prog.h]
    bias = bias_ref[prog.h] if bias_ref is not None else None

    def step(k, state):
        prog.store_state(states_ref, state, prog.b, k, prog.h)
        if keep:
            prog.keep_state(kept[0], state, k)
        return _pass_block(prog, k * dims.block_l, state, x_ref, dt_ref, B_ref, A, bias, seq_ref)[0]

    state = jax.lax.fori_loop(0, dims.nblocks, step, prog.state_or_zeros(init_ref, prog.b, prog.h))
    prog.store_state(final_ref, state, prog.b, prog.h)


def _segment_kernel(x_ref, dt_ref, A_ref, B_ref, *refs, dims: SsdDims, rebuild: bool):
    """Grid ``segment_tiles(dims)`` (``segment_program``): a walk over one segment of ``keep_blocks`` blocks.
    ``rebuild``: from the segment's kept float32 state, storing each block's incoming state in the dot dtype, as the
    forward's state pass would. Otherwise from a zero state, storing only what the segment leaves (float32) and its
    decay (the product of its blocks' carries; every tile of a head stores the same value)."""
    (bias_ref, seq_ref, kept_ref), outs = optional_refs(refs, (dims.has_bias, dims.has_seq, rebuild))
    prog, segment = segment_program(dims)
    A = A_ref[prog.h]
    bias = bias_ref[prog.h] if bias_ref is not None else None
    start = prog.state_or_zeros(kept_ref, prog.b, segment, prog.h)

    def rebuild_step(j, state):
        k, inside, t0 = segment_block(dims, segment, j)
        prog.store_state(outs[0], state, prog.b, k, prog.h, when=inside)
        return _pass_block(prog, t0, state, x_ref, dt_ref, B_ref, A, bias, seq_ref)[0]  # past the end: never read

    def local_step(j, carry):
        state, decay = carry
        _, inside, t0 = segment_block(dims, segment, j)
        new, block_carry = _pass_block(prog, t0, state, x_ref, dt_ref, B_ref, A, bias, seq_ref)
        return jnp.where(inside, new, state), jnp.where(inside, decay * block_carry, decay)

    if rebuild:
        jax.lax.fori_loop(0, dims.keep_blocks, rebuild_step, start)
        return
    state, decay = jax.lax.fori_loop(0, dims.keep_blocks, local_step, (start, jnp.float32(1.0)))
    local_ref, decay_ref = outs
    prog.store_state(local_ref, state, prog.b, segment, prog.h)
    decay_ref[prog.b, segment, prog.h] = decay


def _output_tile(prog: Program, k, x_ref, dt_ref, A_ref, B_ref, C_ref, states_ref, refs) -> None:
    """The output of block ``k`` for ``prog``'s batch row, head and head dims, from the block's stored state."""
    dims = prog.dims
    (D_ref, z_ref, bias_ref, seq_ref, scores_ref), (out_ref, *saved) = optional_refs(
        refs, (dims.has_D, dims.has_z, dims.has_bias, dims.has_seq, dims.has_scores)
    )
    t0 = k * dims.block_l
    A = A_ref[prog.h]
    bias = bias_ref[prog.h] if bias_ref is not None else None
    Dv = prog.load_head_dims(D_ref) if D_ref is not None else None
    blk = prog.block(t0, dt_ref, A, bias, seq_ref)
    x = prog.load_heads(x_ref, t0)
    state_mm = prog.load_state(states_ref, prog.b, k, prog.h)
    ypre_ref = saved[0] if saved else None  # the pre-gate output, if saved
    Cm = prog.load_group(C_ref, t0)
    CB = prog.load_scores(scores_ref, k) if scores_ref is not None else mm(Cm, prog.load_group(B_ref, t0), trans_b=True)
    _block_output(prog, blk, t0, x, CB, Cm, state_mm, Dv, z_ref, out_ref, ypre_ref)


def _output_kernel(x_ref, dt_ref, A_ref, B_ref, C_ref, states_ref, *refs, dims: SsdDims):
    prog, k = block_program(dims)
    _output_tile(prog, k, x_ref, dt_ref, A_ref, B_ref, C_ref, states_ref, refs)


def _shapes(x, dims: SsdDims) -> tuple[jax.ShapeDtypeStruct, ...]:
    """out (batch, L, H, P) x.dtype, the final state (batch, H, P, N) float32, every block's incoming state (batch,
    nblocks, H, P, N) x.dtype, and the states kept for the backward: those, or with ``dims.keep_blocks`` > 1 every
    keep_blocks-th block's (batch, nkept, H, P, N) float32."""
    batch, _, nheads, headdim = x.shape
    out_shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    final_shape = jax.ShapeDtypeStruct((batch, nheads, headdim, dims.dstate), jnp.float32)
    states_shape = jax.ShapeDtypeStruct((batch, dims.nblocks, nheads, headdim, dims.dstate), x.dtype)
    kept_shape = states_shape
    if dims.keep_blocks > 1:
        kept_shape = jax.ShapeDtypeStruct((batch, dims.nkept, nheads, headdim, dims.dstate), jnp.float32)
    return out_shape, final_shape, states_shape, kept_shape


def fused_forward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dims: SsdDims, config, save, save_ypre):
    """``ssd_fwd_fused``, the whole walk: out, the final state, the kept states when ``save`` (else None) and the
    pre-gate output when ``save_ypre`` (else None)."""
    out_shape, final_shape, _, kept_shape = _shapes(x, dims)
    extra = [out_shape] if save_ypre else []
    scores = block_scores(B, C, dims.block_l) if dims.has_scores else None
    optional = (D, z, dt_bias, initial_states, seq_idx, scores)
    inputs = [x, dt, A, B, C] + [t for t in optional if t is not None]
    shapes = [out_shape, final_shape] + ([kept_shape] if save else []) + extra
    kernel = functools.partial(_fused_kernel, dims=dims, save=save)
    warps, stages = config.num_warps, config.num_stages
    out, final, *saved = call_kernel(kernel, inputs, shapes, dims.grid, dims, warps, stages, "ssd_fwd_fused")
    return out, final, (saved[0] if save else None), (saved[1] if extra else None)


def fused_segments_forward(
    x, dt, A, B, C, D, z, dt_bias, seq_idx, starts, dims: SsdDims, config, store_blocks, save_ypre
):
    """``ssd_fwd_fused_segments``, the fused walk once per segment of ``dims.keep_blocks`` blocks from the float32
    state entering it (``starts``): out, every block's incoming state when ``store_blocks`` (else None) and the
    pre-gate output when ``save_ypre`` (else None)."""
    out_shape, _, states_shape, _ = _shapes(x, dims)
    extra = [out_shape] if save_ypre else []
    scores = block_scores(B, C, dims.block_l) if dims.has_scores else None
    shapes = [out_shape] + ([states_shape] if store_blocks else []) + extra
    inputs = [x, dt, A, B, C, starts] + [t for t in (D, z, dt_bias, seq_idx, scores) if t is not None]
    kernel = functools.partial(_fused_segment_kernel, dims=dims, store_blocks=store_blocks)
    grid = (segment_tiles(dims),)
    warps, stages = config.num_warps, config.num_stages
    out, *saved = call_kernel(kernel, inputs, shapes, grid, dims, warps, stages, "ssd_fwd_fused_segments")
    return out, (saved[0] if store_blocks else None), (saved[-1] if extra else None)


def state_pass(x, dt, A, B, dt_bias, initial_states, seq_idx, dims: SsdDims, config, keep: bool):
    """``ssd_fwd_states``, the one-level state pass: every block's incoming state, the final state and a list of
    the kept float32 states (one array with ``keep``, else empty)."""
    _, final_shape, states_shape, kept_shape = _shapes(x, dims)
    inputs = [x, dt, A, B] + [t for t in (dt_bias, initial_states, seq_idx) if t is not None]
    state_dims = dims.with_state_tiles(config.state_block_p, config.state_block_n)
    kernel = functools.partial(_states_kernel, dims=state_dims, keep=keep)
    states, final, *kept = call_kernel(
        kernel,
        inputs,
        [states_shape, final_shape] + ([kept_shape] if keep else []),
        state_dims.grid,
        state_dims,
        config.state_num_warps,
        config.num_stages,
        "ssd_fwd_states",
    )
    return states, final, kept


def segment_states(x, dt, A, B, dt_bias, seq_idx, dims: SsdDims, config):
    """``ssd_fwd_segment_states``: every segment's own end state from a zero start and its decay
    (``segments.segment_outputs``), all segments in parallel."""
    sdims = dims.with_state_tiles(config.rebuild_block_p, config.state_block_n)
    inputs = [x, dt, A, B] + [t for t in (dt_bias, seq_idx) if t is not None]
    kernel = functools.partial(_segment_kernel, dims=sdims, rebuild=False)
    local, decay = call_kernel(
        kernel,
        inputs,
        segment_outputs(dims),
        (segment_tiles(sdims),),
        sdims,
        config.state_num_warps,
        config.num_stages,
        "ssd_fwd_segment_states",
    )
    return local, decay


def rebuild_block_states(x, dt, A, B, dt_bias, seq_idx, kept, dims: SsdDims, config, name: str) -> jax.Array:
    """Every block's incoming state (batch, nblocks, H, P, N) in x.dtype from the kept float32 states
    (batch, nkept, H, P, N), every ``dims.keep_blocks`` blocks, each segment in parallel."""
    batch, _, nheads, headdim = x.shape
    sdims = dims.with_state_tiles(config.rebuild_block_p, config.state_block_n)
    inputs = [x, dt, A, B] + [t for t in (dt_bias, seq_idx) if t is not None] + [kept]
    shape = jax.ShapeDtypeStruct((batch, dims.nblocks, nheads, headdim, dims.dstate), x.dtype)
    kernel = functools.partial(_segment_kernel, dims=sdims, rebuild=True)
    grid = (segment_tiles(sdims),)
    (states,) = call_kernel(kernel, inputs, [shape], grid, sdims, config.state_num_warps, config.num_stages, name)
    return states


def output_pass(x, dt, A, B, C, states, D, z, dt_bias, seq_idx, dims: SsdDims, config, save_ypre):
    """``ssd_fwd_out``, block-parallel from every block's incoming state: out and the pre-gate output when
    ``save_ypre`` (else None)."""
    out_shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    extra = [out_shape] if save_ypre else []
    scores = block_scores(B, C, dims.block_l) if dims.has_scores else None
    inputs = [x, dt, A, B, C, states] + [t for t in (D, z, dt_bias, seq_idx, scores) if t is not None]
    kernel = functools.partial(_output_kernel, dims=dims)
    warps, stages = config.num_warps, config.num_stages
    out, *saved = call_kernel(kernel, inputs, [out_shape, *extra], dims.block_grid, dims, warps, stages, "ssd_fwd_out")
    return out, (saved[0] if extra else None)
