"""The forward's fused walk (``triton.forward``'s ``ssd_fwd_fused`` and ``ssd_fwd_fused_segments`` math) on Pallas's
Mosaic GPU backend: one program per (batch row, segment of blocks, head, 64 head dims), one warpgroup, walking its
segment's blocks of 64 positions with the (64, N) float32 state in registers, every product on ``wgmma``, each
block's tiles (x, B, C, z and the per-position decays) copied into shared memory by TMA while the block before it
computes (``emit_pipeline``).

The Triton fused forward holds the same state in registers too, but beside its (T, N) B and C tiles: past N 128 it
spills (888-1008 bytes a thread at N 256, ``heuristics.WIDE_TILE_MAX_DSTATE``), so N 256 ran the split forward. Here B
and C wait in shared memory and the state is 128 registers a thread at N 256.

Per block, with T = 64 positions i (rows) and j (columns), cs the block's cumulative dt·A, cs_last its sum over the
block (from XLA, ``common.block_cumsums``) and S the (P, N) state entering the block:

    W  = C Bᵀ ∘ exp(cs_i - cs_j) ∘ dt_j on and below the diagonal, in the dot dtype
    y  = exp(cs_i) ∘ (C Sᵀ) + W x + D x,      out = y silu(z) (y kept as the pre-gate output when saving)
    S  = exp(cs_last) S + (dt exp(cs_last - cs) ∘ x)ᵀ B

C Sᵀ reads S's copy in the dot dtype (as the Triton kernels do), which is also what the block states kept for the
backward are. The walk starts from a zero state or from a given float32 one (the initial state, or the state
entering each segment from the two-level state pass) and can leave its float32 end state.

``wgmma`` is asynchronous, so each block issues its products before the register work that does not need them:
C Bᵀ while the update's left operand E = dt exp(cs_last - cs) ∘ x is staged in shared memory; then the state update
and C Sᵀ, and while they run W is formed in registers from C Bᵀ and issued as the left operand of W x (x straight
from its TMA slot: ``products``' late pairs). The update's accumulator starts at exp(cs_last) S: the state is never
in registers twice. Out leaves from E's tile once the update has read it, with no wait at the block's end: the next
block waits for that store only before it stages its own E (the pre-gate output, when saved, has a tile of its
own). Shared memory (``heuristics.walk_shared_bytes``), with z and the pre-gate output: ``stages`` blocks' x, z, B, C
and decay vectors, S's copy, E and the pre-gate output; at N 128 on one stage 81 KB, so two programs share an SM
(``heuristics.walk_stages`` picks one stage where that pays), at N 256 on two 211 KB. At N 256 the state (128 registers
a thread) with the block's accumulators spills (ncu): ``docs/kernels.md#ssd-walk-at-n-256``.

Measured on an H100 (ms forward, against the Triton forward; ``docs/kernels.md#ssd-on-mosaic-gpu``): 130m 0.179
against 0.185, 2.7b 0.253 against 0.347, B2 L8192 H32 G4 N256 (per segment) 0.467 against 0.595, B8 L2048 H24 N256
0.351 against 0.436 (split), B4 L4096 H32 N64 G2 0.192 against 0.240, B1 L16384 H24 0.200 against 0.224; about
even at B1 L65536 H128 (3.51 against 3.55) and B1 L131072 H24 (1.398 against 1.370).

With ``pieces`` > 1 (``SsdConfig.fwd_walk_pieces``, the N 256 default where a program may have only one warpgroup;
with two, ``mosaic_gpu.forward_halves``) the loop over blocks is
``mosaic_gpu.forward_pieces``'s instead of ``emit_pipeline``: B and C come in pieces of N's columns, the state is one
accumulator a piece, and each block does piece i's C Bᵀ, C Sᵀ and update terms in turn (the last piece's update and
C Sᵀ still beside W x), each piece's slot taking the next block's piece once its products are done.

Covered shapes (``mosaic_walk_supported``, as the backward's Mosaic kernels): block_l 64, head dims and N multiples of
64 (N <= 256), L a multiple of 64, 16-bit inputs, no seq_idx. Elsewhere the Triton kernels run.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import sigmoid
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.mosaic_gpu.common import (
    TILE,
    TRANSFORMS,
    call_kernel,
    covers_tiles,
    products,
)
from pallas_kernels.ssd.mosaic_gpu.forward_halves import halves_scratch, walk_in_halves
from pallas_kernels.ssd.mosaic_gpu.forward_pieces import piece_scratch, walk_by_pieces
from pallas_kernels.ssd.mosaic_gpu.walk import STEPS_IN_FLIGHT, start_state, walk_blocks, walk_grid, walk_program


def mosaic_walk_supported(dims: SsdDims, dtype) -> bool:
    """Whether the Mosaic GPU walk covers this problem (else the Triton kernels run)."""
    return covers_tiles(dims, dtype)


def ssd_fwd_walk_mosaic(
    *refs,
    dims: SsdDims,
    parts: int,
    segment_blocks: int,
    has_start: bool,
    outs: tuple,
    stages: int,
    pieces: int,
    warpgroups: int,
):
    """One (batch row, segment, head, 64 head dims): the walk over the segment's blocks (module docstring), by
    ``emit_pipeline`` (pieces 1), with B and C in ``pieces`` of N's columns (``mosaic_gpu.forward_pieces``), or with
    the state in halves of N on two ``warpgroups`` (``mosaic_gpu.forward_halves``). ``outs`` names the outputs after
    ``out``, in order: "ypre", "states", "end"."""
    n_in = 6 + dims.has_D + dims.has_z + has_start
    ins, out_refs, scratch = refs[:n_in], refs[n_in : n_in + 1 + len(outs)], refs[n_in + 1 + len(outs) :]
    x_ref, B_ref, C_ref, dt_ref, cs_ref, last_ref, *opt = ins
    D_ref = opt.pop(0) if dims.has_D else None
    z_ref = opt.pop(0) if dims.has_z else None
    start_ref = opt[0] if has_start else None
    out_ref, named = out_refs[0], dict(zip(outs, out_refs[1:], strict=True))
    S_s, E_s, D_s, barrier, *rest = scratch
    Y_s = rest.pop(0) if "ypre" in named else None  # the pre-gate output's own tile (with z, when saved)

    prog = walk_program(dims, parts, segment_blocks, warpgroups)
    b, h, p, n = prog.b, prog.h, prog.p, dims.dstate
    halves = warpgroups > 1
    own = n // warpgroups  # the state's columns this warpgroup holds (in halves: those of its half, N / 2)
    width = own // pieces  # ... in one piece
    if halves:
        S_s, E_s = S_s.at[prog.w], E_s.at[prog.w]  # its half's copy, its staged update
    f32, dtype = jnp.float32, x_ref.dtype
    wg = plgpu.Layout.WGMMA
    rows_v, cols_v = wg.reduce(1), wg.reduce(0)  # vectors over a tile's rows / columns
    on_rows = lambda v, width=TILE: lax.broadcast_in_dim(v, (TILE, width), [0])  # noqa: E731
    on_cols = lambda v: lax.broadcast_in_dim(v, (TILE, TILE), [1])  # noqa: E731
    first = prog.first
    columns = [pl.ds(i * width, width) for i in range(pieces)]  # of S_s (its half's, in halves)

    if D_ref is not None:
        if halves:  # copied once, read by both warpgroups
            pl.when(prog.w == 0)(lambda: plgpu.copy_gmem_to_smem(D_ref.at[h, p], D_s.at[0], barrier.at[0]))
        else:
            plgpu.copy_gmem_to_smem(D_ref.at[h, p], D_s.at[0], barrier.at[0])
    S = [start_state(start_ref, prog, n, pl.ds(prog.w * own + cols.start, width)) for cols in columns]
    for piece, cols in zip(S, columns, strict=True):
        S_s.at[:, cols][...] = piece.astype(dtype)
    plgpu.commit_smem()
    zeros = plgpu.layout_cast(jnp.zeros((TILE, TILE), f32), wg)
    if D_ref is not None:
        plgpu.barrier_wait(barrier.at[0])
        Dv = plgpu.load(D_s.at[0], layout=cols_v)

    def block(k, x_s, z, vectors, piece_slot, release, S, combine=None):
        """One block (``k`` of the segment): S's copy stored; C·Bᵀ while E is staged; the state update and C Sᵀ, and
        W x as soon as W is formed in registers; y, S's copy for the next block, and the stores (module docstring).
        ``vectors`` are the refs of dt, cs, cs_last (rows) and dt, cs (columns); ``z`` None, or (z's tile once it
        is in, a call once it is read); ``piece_slot(i)`` gives piece i's B and C tiles once they are in,
        ``release(i)`` says its products are done; ``combine(y, outputs)`` (in halves) sums the warpgroups' parts
        of y and calls ``outputs`` on the whole. Returns the state's pieces."""
        k = first + k
        t = pl.ds(k * TILE, TILE)
        dt_s, cs_s, last_s, dt_cols_s, cs_cols_s = vectors
        if "states" in named:
            states = named["states"].at[b, k, h, p]
            plgpu.copy_smem_to_gmem(S_s, states.at[:, pl.ds(prog.w * own, own)] if halves else states)
        dt_r, cs_r = plgpu.load(dt_s, layout=rows_v), plgpu.load(cs_s, layout=rows_v)
        last_r = plgpu.load(last_s, layout=rows_v)

        def stage_update():
            x = plgpu.load(x_s, layout=wg).astype(f32)
            # the block before's out has left E_s (the copy of S_s just issued may still be reading)
            plgpu.wait_smem_to_gmem(int("states" in named), wait_read_only=True)
            E_s[...] = (x * on_rows(dt_r * jnp.exp(last_r - cs_r))).astype(dtype)
            plgpu.commit_smem()

        def diagonal():  # y's diagonal product W x, its left operand W formed in registers
            row = plgpu.broadcasted_iota(jnp.int32, (TILE, TILE), 0, layout=wg)
            col = plgpu.broadcasted_iota(jnp.int32, (TILE, TILE), 1, layout=wg)
            log_decay = on_rows(cs_r) - on_cols(plgpu.load(cs_cols_s, layout=cols_v))
            weights = CB * jnp.exp(log_decay) * on_cols(plgpu.load(dt_cols_s, layout=cols_v))
            # (an overflow above the diagonal, where cs_i > cs_j, is selected away)
            return [(jnp.where(row >= col, weights, 0.0).astype(dtype), x_s)]

        def scores(i):  # C_i B_iᵀ: [i, j] = C_i · B_j over piece i's columns
            B_i, C_i = piece_slot(i)
            return (C_i, B_i.transpose((1, 0)))

        def update(i):  # Eᵀ B_i: the update of the state's columns in piece i
            return (E_s.transpose((1, 0)), piece_slot(i)[0])

        def state_scores(i):  # C_i S_iᵀ: piece i's part of C Sᵀ
            return (piece_slot(i)[1], S_s.at[:, columns[i]].transpose((1, 0)))

        # S's rows are head dims: every one scaled by exp(cs_last)
        carried = [on_rows(jnp.exp(last_r), width) * S_i for S_i in S]
        last = pieces - 1
        # C Bᵀ (and C Sᵀ, before the last piece) while E is staged; then each piece's C Bᵀ beside the update of the
        # piece before; then the last piece's update and C Sᵀ, with W x once W is formed from the whole C Bᵀ
        if pieces == 1:
            (CB,) = products((zeros,), [scores(0)], dims.interpret, stage_update)
            CS = zeros
        else:
            CB, CS = products((zeros, zeros), [scores(0), state_scores(0)], dims.interpret, stage_update)
        new = []
        for i in range(1, pieces):
            more = [state_scores(i)] if i < last else []  # the last piece's C Sᵀ goes with W x
            inits = (CB, carried[i - 1], *([CS] if more else []))
            CB, S_done, *CS_more = products(inits, [scores(i), update(i - 1), *more], dims.interpret)
            CS = CS_more[0] if more else CS
            new.append(S_done)
            release(i - 1)
        pairs = [update(last), state_scores(last)]
        S_done, CS, y = products((carried[last], CS, zeros), pairs, dims.interpret, diagonal)
        release(last)
        new.append(S_done)
        y = y + on_rows(jnp.exp(cs_r)) * CS

        def copy_state():  # S's copy for the next block's C Sᵀ (and its stored state)
            for piece, cols in zip(new, columns, strict=True):
                S_s.at[:, cols][...] = piece.astype(dtype)

        def outputs(y, with_state: bool):  # D x, the pre-gate output, the gate, out (and S's copy) stored
            if D_ref is not None:
                y = y + on_cols(Dv) * plgpu.load(x_s, layout=wg).astype(f32)
            if Y_s is not None:
                Y_s[...] = y.astype(dtype)
            if z is not None:
                z_tile, z_read = z
                gate = plgpu.load(z_tile(), layout=wg).astype(f32)
                z_read()
                y = y * gate * sigmoid(gate)
            if with_state:
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the copy of S_s issued at the start has read it
            E_s[...] = y.astype(dtype)  # the update has read E_s: out leaves from it, while the next block starts
            if with_state:
                copy_state()
            plgpu.commit_smem()
            if Y_s is not None:
                plgpu.copy_smem_to_gmem(Y_s, named["ypre"].at[b, t, h, p])
            plgpu.copy_smem_to_gmem(E_s, out_ref.at[b, t, h, p])

        if combine is None:
            outputs(y, with_state=True)
            return new
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the copy of S_s issued at the start has read it
        copy_state()
        plgpu.commit_smem()
        combine(y, lambda whole: outputs(whole, with_state=False))
        return new

    inputs = dict(x=x_ref, B=B_ref, C=C_ref, dt=dt_ref, cs=cs_ref, last=last_ref, z=z_ref)
    if halves:
        walk_in_halves(inputs, rest, prog, block, S, named.get("end"))
        return
    if pieces > 1:
        walk_by_pieces(inputs, rest, prog, pieces, block, S, named.get("end"))
        return

    def step(indices, x_s, B_s, C_s, dt_s, dt_cols_s, cs_s, cs_cols_s, last_s, *rest):
        *z_s, S = rest
        vectors = (dt_s, cs_s, last_s, dt_cols_s, cs_cols_s)
        z = (lambda: z_s[0], lambda: None) if z_s else None
        return block(indices[0], x_s, z, vectors, lambda i: (B_s, C_s), lambda i: None, [S])[0]

    def head_tile(ref):
        return ref.at[b, :, h], plgpu.BlockSpec((TILE, TILE), lambda j: (first + j, prog.part), transforms=TRANSFORMS)

    def group_tile(ref):
        return ref.at[b, :, prog.g], plgpu.BlockSpec((TILE, n), lambda j: (first + j, 0), transforms=TRANSFORMS)

    def vector(ref):
        return ref.at[b, h], plgpu.BlockSpec((TILE,), lambda j: (first + j,))

    streams = [head_tile(x_ref), group_tile(B_ref), group_tile(C_ref)]
    streams += [vector(ref) for ref in (dt_ref, dt_ref, cs_ref, cs_ref, last_ref)]  # dt, cs twice: rows and columns
    streams += [head_tile(z_ref)] if z_ref is not None else []
    walk_blocks(step, streams, S[0], prog, named.get("end"), stages)


def mosaic_walk(
    x,
    vectors,
    B,
    C,
    D,
    z,
    starts,
    dims: SsdDims,
    *,
    segment_blocks: int,
    states: bool,
    ypre: bool,
    end: bool,
    stages: int = STEPS_IN_FLIGHT,
    pieces: int = 1,
    warpgroups: int = 1,
):
    """The fused walk by the Mosaic GPU kernel over segments of ``segment_blocks`` blocks (all of them: one walk per
    sequence), each from ``starts`` (batch, segments, H, P, N) float32, or from zeros where None. Returns out
    (batch, L, H, P) in x's dtype, then as asked: the pre-gate output (like out; only with z), every block's
    incoming state (batch, nblocks, H, P, N) in x's dtype, the state leaving each segment (batch, segments, H, P, N)
    float32.

    x, z (batch, L, H, P) and B, C (batch, L, G, N) in one 16-bit dtype; ``vectors`` the per-position (scale, cs,
    cs_last), each (batch, H, L) float32 (``common.block_cumsums`` for dt·A, ``common.decay_vectors`` for any
    decay); D (H, P) float32 or None."""
    batch, _, nheads, headdim = x.shape
    parts, n, f32 = headdim // TILE, dims.dstate, jnp.float32
    segments = -(-dims.nblocks // segment_blocks)
    tile16 = lambda shape: plgpu.SMEM(shape, x.dtype, transforms=TRANSFORMS)  # noqa: E731
    each = lambda shape: (warpgroups, *shape)[warpgroups == 1 :]  # noqa: E731  in halves, one a warpgroup
    scratch = [
        tile16(each((TILE, n // warpgroups))),  # S in the dot dtype (in halves, each warpgroup's half)
        tile16(each((TILE, TILE))),  # exp(cs_last - cs) ∘ X, then out
        plgpu.SMEM((1, TILE), f32),  # D's head dims
        plgpu.Barrier(num_barriers=1),  # D's copy
    ]
    ypre = ypre and z is not None
    scratch += [tile16((TILE, TILE))] if ypre else []  # the pre-gate output
    if warpgroups > 1:
        scratch += halves_scratch(n, x.dtype, z is not None)
    elif pieces > 1:
        scratch += piece_scratch(n, x.dtype, pieces, z is not None)
    names = [name for name, wanted in (("ypre", ypre), ("states", states), ("end", end)) if wanted]
    shapes = {
        "ypre": jax.ShapeDtypeStruct(x.shape, x.dtype),
        "states": jax.ShapeDtypeStruct((batch, dims.nblocks, nheads, headdim, n), x.dtype),
        "end": jax.ShapeDtypeStruct((batch, segments, nheads, headdim, n), f32),
    }
    inputs = [x, B, C, *vectors]
    inputs += [t for t in (D, z, starts) if t is not None]
    out, *rest = call_kernel(
        functools.partial(
            ssd_fwd_walk_mosaic,
            dims=dims,
            parts=parts,
            segment_blocks=segment_blocks,
            has_start=starts is not None,
            outs=tuple(names),
            stages=stages,
            pieces=pieces,
            warpgroups=warpgroups,
        ),
        inputs,
        out_type=[jax.ShapeDtypeStruct(x.shape, x.dtype)] + [shapes[name] for name in names],
        scratch=scratch,
        **walk_grid(nheads * parts, segments, batch, warpgroups),
        name="ssd_fwd_fused" if segments == 1 else "ssd_fwd_fused_segments",
        dims=dims,
    )
    named = dict(zip(names, rest, strict=True))
    return out, named.get("ypre"), named.get("states"), named.get("end")
