"""Which kernel runs each pass of the Pallas SSD, forward and backward, for a config and a shape: the Mosaic GPU
kernel (``mosaic_gpu/``) where its ``SsdConfig`` switch is on and it covers the shape, else the Triton one
(``triton/``); the fused or split forward, one- or two-level state passes. The kernels' modules hold only the
kernels and their launches.

The forward, two ways, the fused one when L <= ``SsdConfig.fused_forward_max_l``:
  - split: a sequential state pass, then a block-parallel output pass (``triton.forward``);
  - fused: one sequential pass that also computes the output as it walks (no states stored unless saving).
With two-level state passes (``SsdConfig.two_level_states``) the state pass gives each segment's incoming state;
``SsdConfig.fused_segments`` then runs the fused walk once per segment instead of writing every block's state for the
output pass to read back. With ``SsdConfig.fwd_mosaic`` both fused walks run on Mosaic GPU (``mosaic_gpu.forward``)
where it covers the shape, with ``SsdConfig.states_mosaic`` the sequential state passes (``mosaic_gpu.states``; the
walks over segments stay Triton).

The backward: the state gradients (one- or two-level, Triton or ``mosaic_gpu.states``), then the per-head kernel
(``bwd_dx_mosaic``: ``mosaic_gpu.backward_dx``) and the dB/dC kernel (``bwd_dbc_mosaic``:
``mosaic_gpu.backward_dbc``), each on Mosaic GPU where it covers the shape, else on Triton (``triton.backward``).
"""

import dataclasses
import functools

import jax

from pallas_kernels.ssd.dims import SsdDims, segment_dims
from pallas_kernels.ssd.mosaic_gpu.backward_dbc import mosaic_dbc, mosaic_dbc_supported
from pallas_kernels.ssd.mosaic_gpu.backward_dx import mosaic_dx, mosaic_dx_supported
from pallas_kernels.ssd.mosaic_gpu.common import block_cumsums, block_decays, covers_tiles
from pallas_kernels.ssd.mosaic_gpu.forward import mosaic_walk, mosaic_walk_supported
from pallas_kernels.ssd.mosaic_gpu.states import mosaic_state_walk, segment_decays, walk_vectors, walk_weights
from pallas_kernels.ssd.triton import backward as triton_bwd
from pallas_kernels.ssd.triton import forward as triton_fwd
from pallas_kernels.ssd.triton.segments import segment_walk


def walk_loop(config) -> dict:
    """The Mosaic walk's loop from ``config``: its pipeline depth, the pieces of N it loads B and C by, or its
    state's halves on two warpgroups."""
    return dict(stages=config.fwd_walk_stages, pieces=config.fwd_walk_pieces, warpgroups=config.fwd_walk_warpgroups)


def dx_on_mosaic(dims: SsdDims, config, dtype) -> bool:
    """Whether the backward's per-head kernel runs on Mosaic GPU: then it recomputes the pre-gate output itself, so
    the forward neither stores nor keeps it (the Triton kernel reads it)."""
    return config.bwd_dx_mosaic and mosaic_dx_supported(dims, dtype)


def rebuild_block_states(
    x, dt, A, B, dt_bias, seq_idx, kept, dims: SsdDims, config, name: str = "ssd_bwd_rebuild_states"
) -> jax.Array:
    """Every block's incoming state (batch, nblocks, H, P, N) in x.dtype from the kept float32 states
    (batch, nkept, H, P, N), every ``dims.keep_blocks`` blocks."""
    if config.states_mosaic and covers_tiles(dims, x.dtype):
        weight, last = walk_vectors(dt, A, dt_bias, dims, reverse=False)
        walk = dict(segment_blocks=dims.keep_blocks, reverse=False, states=True, end=False, name=name)
        return mosaic_state_walk(x, B, weight, last, None, kept, dims, **walk)[0]
    return triton_fwd.rebuild_block_states(x, dt, A, B, dt_bias, seq_idx, kept, dims, config, name)


def two_level_states(x, dt, A, B, dt_bias, initial_states, seq_idx, dims: SsdDims, config):
    """The forward's state pass in two levels (``SsdConfig.two_level_states``): every segment's own end state and
    decay in parallel (``ssd_fwd_segment_states``), then the elementwise walk over segments (``segments``). Returns
    the state entering each segment (batch, nkept, H, P, N) float32, the states the backward keeps, and the final
    state (batch, H, P, N) float32."""
    if config.states_mosaic and covers_tiles(dims, x.dtype):
        return mosaic_segment_starts(x, B, block_cumsums(dt, A, dt_bias, dims), initial_states, dims, config)
    local, decay = triton_fwd.segment_states(x, dt, A, B, dt_bias, seq_idx, dims, config)
    return segment_walk(local, decay, initial_states, dims, config, reverse=False, name="ssd_fwd_segment_walk")


def mosaic_segment_starts(x, B, vectors, initial, dims: SsdDims, config, op: str = "ssd"):
    """``two_level_states`` on Mosaic GPU for any decay (``vectors``: ``common.decay_vectors``'s): each segment of
    ``dims.keep_blocks`` blocks' own end state by the state walk, then the walk over segments. Returns (the state
    entering each segment (batch, nkept, H, P, N), the final state (batch, H, P, N)), float32. ``op`` begins the
    kernels' names (Mamba-3 runs these passes too)."""
    weight, last = walk_weights(vectors, reverse=False)
    walk = dict(segment_blocks=dims.keep_blocks, reverse=False, states=False, end=True)
    local = mosaic_state_walk(x, B, weight, last, None, None, dims, **walk, name=f"{op}_fwd_segment_states")[1]
    decay = segment_decays(last, dims.keep_blocks)
    return segment_walk(local, decay, initial, dims, config, reverse=False, name=f"{op}_fwd_segment_walk")


def ssd_forward(
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, dims: SsdDims, config, save: bool
) -> tuple[jax.Array, jax.Array, jax.Array | None, jax.Array | None]:
    """Returns out (batch, L, H, P) x.dtype, final states (batch, H, P, N) float32, and when ``save`` the
    block-start states (batch, nblocks, H, P, N) in x.dtype, or with ``dims.keep_blocks`` > 1 those of every
    keep_blocks-th block (batch, nkept, H, P, N) float32, and (with z, when the backward reads it) the pre-gate output
    (batch, L, H, P)."""
    # the pre-gate output, for a backward that reads it (the Mosaic GPU one recomputes it)
    save_ypre = save and z is not None and not dx_on_mosaic(dims, config, x.dtype)
    keep = save and dims.keep_blocks > 1
    mosaic = config.fwd_mosaic and mosaic_walk_supported(dims, x.dtype)
    whole_walk = dims.seqlen <= config.fused_forward_max_l
    if whole_walk and mosaic and keep:
        # The Mosaic walk stores every block's state or none: to keep float32 states every few blocks it runs once per
        # segment of them instead, from the two-level state pass's. On an H200 the Triton walk that keeps them took
        # 1.11 of 3.53 ms forward+backward at B4 L4096 H64 N256 G8; this way took 2.13 against 2.50 ms at B8 L2048
        # H80 N128 (docs/kernels.md#ssd-kept-states)
        config = dataclasses.replace(config, two_level_states=True, fused_segments=True)
        whole_walk = False
    if whole_walk and mosaic:
        starts = None if initial_states is None else initial_states[:, None]
        walk = dict(segment_blocks=dims.nblocks, states=save, ypre=save_ypre, end=True, **walk_loop(config))
        vectors = block_cumsums(dt, A, dt_bias, dims)
        out, ypre, states, end = mosaic_walk(x, vectors, B, C, D, z, starts, dims, **walk)
        return out, end[:, 0], states, ypre
    if whole_walk:
        args = (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx)
        return triton_fwd.fused_forward(*args, dims, config, save, save_ypre)

    segments = segment_dims(dims, config)
    if segments is not None:
        kept, final = two_level_states(x, dt, A, B, dt_bias, initial_states, seq_idx, segments, config)
        store_blocks = save and not keep
        if config.fused_segments and mosaic:
            walk = dict(
                segment_blocks=segments.keep_blocks,
                states=store_blocks,
                ypre=save_ypre,
                end=False,
                **walk_loop(config),
            )
            vectors = block_cumsums(dt, A, dt_bias, segments)
            out, ypre, states, _ = mosaic_walk(x, vectors, B, C, D, z, kept, segments, **walk)
            return out, final, ((kept if keep else states) if save else None), ypre
        if config.fused_segments:
            args = (x, dt, A, B, C, D, z, dt_bias, seq_idx, kept, segments, config, store_blocks, save_ypre)
            out, states, ypre = triton_fwd.fused_segments_forward(*args)
            return out, final, ((kept if keep else states) if save else None), ypre
        states = rebuild_block_states(x, dt, A, B, dt_bias, seq_idx, kept, segments, config, "ssd_fwd_block_states")
        kept = [kept]
    else:
        states, final, kept = triton_fwd.state_pass(x, dt, A, B, dt_bias, initial_states, seq_idx, dims, config, keep)
    args = (x, dt, A, B, C, states, D, z, dt_bias, seq_idx, dims, config, save_ypre)
    out, ypre = triton_fwd.output_pass(*args)
    return out, final, ((kept[0] if keep else states) if save else None), ypre


def _two_level_dstates(dt, A, C, dout, dfinal, z, dt_bias, seq_idx, states, dims: SsdDims, config):
    """``ssd_bwd_dstates`` in two levels (``SsdConfig.two_level_states``): each segment's own contribution and decay
    in parallel, the reverse walk over segments from d final_states, then each segment's blocks from the gradient of
    the state leaving it, by the Triton kernels (on Mosaic GPU: ``mosaic_dstates``). Returns the block state gradients
    (like ``states``) and d initial_states."""
    local, decay = triton_bwd.segment_dstates(dt, A, C, dout, z, dt_bias, seq_idx, dims, config)
    ends, dinit = segment_walk(local, decay, dfinal, dims, config, reverse=True, name="ssd_bwd_segment_walk")
    dstates = triton_bwd.block_dstates(dt, A, C, dout, z, dt_bias, seq_idx, ends, states, dims, config)
    return dstates, dinit


def mosaic_dstates(dout, C, vectors, gate, dfinal, dims: SsdDims, segments: SsdDims | None, config, op: str = "ssd"):
    """The backward's state gradients on Mosaic GPU for any decay (``vectors``: ``common.decay_vectors``'s): every
    block's outgoing state's gradient (batch, nblocks, H, P, N) in dout's dtype and d initial state (batch, H, P, N)
    float32 where ``dims.has_init`` (else None). One reverse walk, or with ``segments`` (dims whose keep_blocks are a
    segment's) two levels as ``_two_level_dstates``. ``gate``: z, whose silu multiplies dout, or None; ``op`` begins
    the kernels' names (Mamba-3 runs these passes too)."""
    weight, last = walk_weights(vectors, reverse=True)
    if segments is None:
        walk = dict(segment_blocks=dims.nblocks, reverse=True, states=True, end=dims.has_init)
        dstates, end = mosaic_state_walk(
            dout, C, weight, last, gate, dfinal[:, None], dims, **walk, name=f"{op}_bwd_dstates"
        )
        return dstates, (None if end is None else end[:, 0])
    blocks = segments.keep_blocks
    walk = functools.partial(
        mosaic_state_walk, dout, C, weight, last, gate, dims=segments, segment_blocks=blocks, reverse=True
    )
    local = walk(None, states=False, end=True, name=f"{op}_bwd_segment_dstates")[1]
    decay = segment_decays(last, blocks)
    ends, dinit = segment_walk(local, decay, dfinal, segments, config, reverse=True, name=f"{op}_bwd_segment_walk")
    dstates = walk(ends, states=True, end=False, name=f"{op}_bwd_block_dstates")[0]
    return dstates, (dinit if dims.has_init else None)


def ssd_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, states, ypre, dout, dfinal, dims, config):
    """Returns dx, ddt and dz or None in their inputs' dtypes, partials dB and dC (batch, L, G * splits, N; float32
    where splits > 1, else in B's and C's dtypes), dA (batch, nblocks, H), dD (batch, nblocks, H, P) or None and
    d dt_bias (batch, nblocks, H) or None, and d initial_states (batch, H, P, N) float32 or None. ``dims`` has whole
    heads (block_p >= headdim); the per-head kernel splits them by ``config.bwd_block_p``."""
    segments = segment_dims(dims, config) if config.two_level_backward else None
    if config.states_mosaic and covers_tiles(dims, dout.dtype):
        vectors = block_cumsums(dt, A, dt_bias, dims)
        dstates, dinit = mosaic_dstates(dout, C, vectors, z, dfinal, dims, segments, config)
        dinit = [] if dinit is None else [dinit]
    elif segments is not None:
        dstates, dinit = _two_level_dstates(dt, A, C, dout, dfinal, z, dt_bias, seq_idx, states, segments, config)
        dinit = [dinit] if initial_states is not None else []
    else:
        args = (dt, A, C, dout, dfinal, z, dt_bias, seq_idx, states, initial_states, dims, config)
        dstates, dinit = triton_bwd.dstates_pass(*args)

    tensors = [x, dt, A, B, C, states, dstates, dout]
    dx_mosaic = dx_on_mosaic(dims, config, x.dtype)
    dbc_mosaic = config.bwd_dbc_mosaic and mosaic_dbc_supported(dims, x.dtype, config.bwd_dbc_columns)
    decays = block_decays(dt, A, dt_bias, dims) if dx_mosaic or dbc_mosaic else None  # once for both kernels
    if dx_mosaic:
        dx, ddt, dA, dbias, dD, dz = mosaic_dx(x, dt, A, decays, B, C, D, z, dt_bias, states, dstates, dout, dims)
    else:
        dx, ddt, dA, dD, dz, dbias = triton_bwd.dx(tensors, D, z, dt_bias, seq_idx, ypre, dims, config)
    if dbc_mosaic:
        dB, dC = mosaic_dbc(x, decays, B, C, z, states, dstates, dout, dims, config.bwd_dbc_columns)
    else:
        dB, dC = triton_bwd.dbc(tensors, z, dt_bias, seq_idx, dims, config)
    return dx, ddt, dB, dC, dA, dD, dz, dbias, (dinit[0] if dinit else None)
