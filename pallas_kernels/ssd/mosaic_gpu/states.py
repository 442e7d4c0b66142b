"""The sequential state passes on Pallas's Mosaic GPU backend: the forward's state walk (``triton.forward``'s
``ssd_fwd_segment_states``, ``ssd_fwd_block_states`` and ``ssd_bwd_rebuild_states``) and the backward's walk of the
state gradients, last block first (``triton.backward``'s ``ssd_bwd_dstates``, ``ssd_bwd_segment_dstates`` and
``ssd_bwd_block_dstates``). One program per (batch row, segment of blocks, head, 64 head dims), one warpgroup, walks
its segment with the (64, N) float32 state (or state gradient) as a ``wgmma`` accumulator; each block's tiles come
into shared memory by TMA while the block before it computes (``emit_pipeline``).

Both directions are one recurrence over blocks of T = 64 positions, with V a (T, 64) tile of head dims, W the
group's (T, N) tile, w a per-position weight and cs_last the block's summed dt·A:

    S = exp(cs_last) S + (w ∘ V)ᵀ W

forward: V = x, W = B, w = dt exp(cs_last - cs) (the state leaving the block from the one entering it);
backward: V = dy = dout silu(z), W = C, w = exp(cs) (the gradient of the state entering the block from that of the
one leaving it). w ∘ V is rounded to the dot dtype, as the Triton passes round it. A walk can store every block's
state before its update in the dot dtype (the forward's block states, the backward's block state gradients), and
leave its float32 end state: the segment's own contribution from a zero start (two-level passes, with the segment's
decay from XLA: ``segment_decays``), the final state, or d initial_states.

The Triton passes hold the same tile in registers and loop with Triton's software pipelining. On an H200 at B1
L65536 H128 (profiler, ``docs/kernels.md#ssd-state-passes-and-segments``) they took 814 (forward segment states),
1,273 (rebuild), 1,226 (segment state gradients) and 1,645 us (block state gradients), these kernels 428, 1,148, 697
and 1,433: 1.1-1.3x the time their bytes take at the run's copy bandwidth.
At 130m the one-level state gradients took 153 us on Triton, 64 here.

Shared memory at N 128 with z: two stages of V, W, z and the two vectors (65 KB), the stored state's copy and w ∘ V
(24 KB), so two programs fit an SM's 228 KB, each one's register work beside the other's products (the occupancy
reached was not measured). Covered shapes as the other Mosaic GPU kernels (``common.covers_tiles``).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import sigmoid
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.mosaic_gpu.common import TILE, TRANSFORMS, block_cumsums, call_kernel, products
from pallas_kernels.ssd.mosaic_gpu.walk import start_state, walk_blocks, walk_grid, walk_program


def walk_vectors(dt: jax.Array, A: jax.Array, dt_bias, dims: SsdDims, *, reverse: bool):
    """The walk's per-position weight w and cs_last (module docstring), each (batch, H, L) float32."""
    return walk_weights(block_cumsums(dt, A, dt_bias, dims), reverse=reverse)


def walk_weights(vectors: tuple[jax.Array, jax.Array, jax.Array], *, reverse: bool) -> tuple[jax.Array, jax.Array]:
    """``walk_vectors`` from the forward's per-position (scale, cs, cs_last) (``common.decay_vectors``)."""
    scale, cs, last = vectors
    return (jnp.exp(cs) if reverse else scale * jnp.exp(last - cs)), last


def segment_decays(last: jax.Array, segment_blocks: int) -> jax.Array:
    """Each segment's decay exp(sum of its blocks' cs_last) (batch, segments, H) float32 from cs_last (batch, H, L)
    (the product of its blocks' carries: what a two-level pass's walk over segments multiplies by)."""
    per_block = last[:, :, TILE - 1 :: TILE]
    nblocks = per_block.shape[-1]
    segments = -(-nblocks // segment_blocks)
    padded = jnp.pad(per_block, ((0, 0), (0, 0), (0, segments * segment_blocks - nblocks)))
    sums = padded.reshape(*per_block.shape[:2], segments, segment_blocks).sum(axis=-1)
    return jnp.moveaxis(jnp.exp(sums), 2, 1)


def ssd_state_walk_mosaic(
    *refs, dims: SsdDims, parts: int, segment_blocks: int, reverse: bool, has_gate: bool, has_start: bool, outs: tuple
):
    """One (batch row, segment, head, 64 head dims): the walk over the segment's blocks (module docstring).
    ``outs`` names the outputs in order: "states", "end"."""
    n_in = 4 + has_gate + has_start
    ins, out_refs, scratch = refs[:n_in], refs[n_in : n_in + len(outs)], refs[n_in + len(outs) :]
    v_ref, w_ref, weight_ref, last_ref, *opt = ins
    gate_ref = opt.pop(0) if has_gate else None
    start_ref = opt[0] if has_start else None
    named = dict(zip(outs, out_refs, strict=True))
    E_s, *S_s = scratch  # S_s: the state's copy in the dot dtype, only where block states are stored

    prog = walk_program(dims, parts, segment_blocks)
    b, h, p, n = prog.b, prog.h, prog.p, dims.dstate
    f32, dtype = jnp.float32, v_ref.dtype
    wg = plgpu.Layout.WGMMA
    rows_v = wg.reduce(1)
    on_rows = lambda v, width=TILE: lax.broadcast_in_dim(v, (TILE, width), [0])  # noqa: E731
    block = (lambda j: prog.first + prog.steps - 1 - j) if reverse else (lambda j: prog.first + j)

    S = start_state(start_ref, prog, n)
    if S_s:
        S_s[0][...] = S.astype(dtype)
        plgpu.commit_smem()

    def step(indices, v_s, w_s, weight_s, last_s, *rest):
        """One block: the stored state's copy leaves; w ∘ V is staged; the update; the next block's copy."""
        *gate_s, S = rest
        if S_s:
            plgpu.copy_smem_to_gmem(S_s[0], named["states"].at[b, block(indices[0]), h, p])
        v = plgpu.load(v_s, layout=wg).astype(f32)
        if gate_s:
            z = plgpu.load(gate_s[0], layout=wg).astype(f32)
            v = v * z * sigmoid(z)
        E_s[...] = (v * on_rows(plgpu.load(weight_s, layout=rows_v))).astype(dtype)
        plgpu.commit_smem()
        # S's rows are head dims: every one scaled by the block's exp(cs_last), the same at each of its positions
        carried = on_rows(jnp.exp(plgpu.load(last_s, layout=rows_v)), n) * S
        (S,) = products((carried,), [(E_s.transpose((1, 0)), w_s)], dims.interpret)
        if S_s:
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the store has read the copy
            S_s[0][...] = S.astype(dtype)
            plgpu.commit_smem()
        return S

    def tile(ref, head, width, col):
        spec = plgpu.BlockSpec((TILE, width), lambda j: (block(j), col), transforms=TRANSFORMS)
        return ref.at[b, :, head], spec

    def vector(ref):
        return ref.at[b, h], plgpu.BlockSpec((TILE,), lambda j: (block(j),))

    streams = [tile(v_ref, h, TILE, prog.part), tile(w_ref, prog.g, n, 0), vector(weight_ref), vector(last_ref)]
    streams += [tile(gate_ref, h, TILE, prog.part)] if gate_ref is not None else []
    walk_blocks(step, streams, S, prog, named.get("end"))


def mosaic_state_walk(
    v,
    w,
    weight,
    last,
    gate,
    starts,
    dims: SsdDims,
    *,
    segment_blocks: int,
    reverse: bool,
    states: bool,
    end: bool,
    name: str,
):
    """The state walk by the Mosaic GPU kernel over segments of ``segment_blocks`` blocks, first block first or, with
    ``reverse``, last first, each from ``starts`` (batch, segments, H, P, N) float32 or from zeros where None.
    Returns (every block's state before its update (batch, nblocks, H, P, N) in v's dtype, or None; the state
    leaving each segment's walk (batch, segments, H, P, N) float32, or None), as ``states`` and ``end`` ask.

    v (batch, L, H, P): x, or dout; w (batch, L, G, N): B, or C, in v's 16-bit dtype; weight, last (batch, H, L)
    float32 from ``walk_vectors``; gate (batch, L, H, P) or None: z, whose silu multiplies v (the backward). ``name``:
    the kernel's, as the Triton pass it stands for."""
    batch, _, nheads, headdim = v.shape
    parts, n = headdim // TILE, dims.dstate
    segments = -(-dims.nblocks // segment_blocks)
    tile16 = lambda shape: plgpu.SMEM(shape, v.dtype, transforms=TRANSFORMS)  # noqa: E731
    scratch = [tile16((TILE, TILE))] + ([tile16((TILE, n))] if states else [])  # w ∘ V; the state's copy
    names = [name for name, wanted in (("states", states), ("end", end)) if wanted]
    shapes = {
        "states": jax.ShapeDtypeStruct((batch, dims.nblocks, nheads, headdim, n), v.dtype),
        "end": jax.ShapeDtypeStruct((batch, segments, nheads, headdim, n), jnp.float32),
    }
    inputs = [v, w, weight, last] + [t for t in (gate, starts) if t is not None]
    results = call_kernel(
        functools.partial(
            ssd_state_walk_mosaic,
            dims=dims,
            parts=parts,
            segment_blocks=segment_blocks,
            reverse=reverse,
            has_gate=gate is not None,
            has_start=starts is not None,
            outs=tuple(names),
        ),
        inputs,
        out_type=[shapes[name] for name in names],
        scratch=scratch,
        **walk_grid(nheads * parts, segments, batch),
        name=name,
        dims=dims,
    )
    named = dict(zip(names, results, strict=True))
    return named.get("states"), named.get("end")
