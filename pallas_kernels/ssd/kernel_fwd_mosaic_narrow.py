"""The forward's fused walk on Mosaic GPU (``kernel_fwd_mosaic``'s math) on 32 head dims a program, the state
transposed: Sᵀ (N, 32) float32 is the ``wgmma`` accumulator, 64 registers a thread at N 256 where the 64-dim walk's
(64, N) state takes 128 and spills beside the block's accumulators.

The 64-dim walk at N 256 holds 121 KB of shared memory (x, z, B, C, S's copy, the staged update), so one program runs
an SM and waits on every load and product (ncu, ``benchmarks/kernels/h200-2026-11-28c-ssd-walk-ncu-*``). Here x, z,
the staged update and the output are (64, 32) tiles and S's copy (N, 32): about 97 KB at N 256 on one stage, so two
programs share an SM. The price: each head's B and C are loaded, and C Bᵀ computed, once per 32 head dims.

Per block (the 64-dim walk's names; E = dt exp(cs_last - cs) ∘ x, (64, 32)):

    C Bᵀ (64, 64) while E is staged;  Sᵀ = exp(cs_last) Sᵀ + Bᵀ E  (B's tile read transposed, 256 rows);
    y = exp(cs_i) ∘ (C Sᵀ) + W x + D x,   out = y silu(z)

with C Sᵀ reading S's copy, which is Sᵀ in the dot dtype: ``wgmma``'s right operand as it is. Every 16-bit tile is in
rows of 32 elements (64-byte swizzle), the widest that x's (64, 32) tiles allow; B's and C's tiles are read with the
same swizzle, which ``wgmma`` needs for both operands. The block states (kept for the backward) and the segments'
start and end states are transposed too, (..., N, P): ``kernel_fwd_mosaic.mosaic_walk`` swaps their last two axes.
"""

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels.ssd.block import SsdDims
from pallas_kernels.ssd.mosaic import TILE, products
from pallas_kernels.ssd.mosaic_walk import start_state, walk_blocks, walk_program

NARROW = 32  # head dims a program
NARROW_TRANSFORMS = (plgpu.TilingTransform((8, NARROW)), plgpu.SwizzleTransform(64))  # 16-bit rows of 32


def ssd_fwd_walk_mosaic_narrow(
    *refs, dims: SsdDims, parts: int, segment_blocks: int, has_start: bool, outs: tuple, stages: int
):
    """One (batch row, segment, head, 32 head dims): the walk over the segment's blocks (module docstring).
    ``outs`` names the outputs after ``out``, in order: "ypre", "states", "end" (the last two transposed)."""
    n_in = 6 + dims.has_D + dims.has_z + has_start
    ins, out_refs, scratch = refs[:n_in], refs[n_in : n_in + 1 + len(outs)], refs[n_in + 1 + len(outs) :]
    x_ref, B_ref, C_ref, dt_ref, cs_ref, last_ref, *opt = ins
    D_ref = opt.pop(0) if dims.has_D else None
    z_ref = opt.pop(0) if dims.has_z else None
    start_ref = opt[0] if has_start else None
    out_ref, named = out_refs[0], dict(zip(outs, out_refs[1:], strict=True))
    S_s, E_s, D_s, barrier, *Y = scratch
    Y_s = Y[0] if Y else None

    prog = walk_program(dims, parts, segment_blocks, width=NARROW)
    b, h, g, p, n = prog.b, prog.h, prog.g, prog.p, dims.dstate
    f32, dtype = jnp.float32, x_ref.dtype
    wg = plgpu.Layout.WGMMA
    rows_v, cols_v = wg.reduce(1), wg.reduce(0)
    on_rows = lambda v: lax.broadcast_in_dim(v, (TILE, NARROW), [0])  # noqa: E731
    on_cols = lambda v, rows=TILE, width=NARROW: lax.broadcast_in_dim(v, (rows, width), [1])  # noqa: E731
    first = prog.first

    if D_ref is not None:
        plgpu.copy_gmem_to_smem(D_ref.at[h, p], D_s.at[0], barrier.at[0])
    S = start_state(start_ref, prog, n, transposed=True)
    S_s[...] = S.astype(dtype)
    plgpu.commit_smem()
    zeros = plgpu.layout_cast(jnp.zeros((TILE, NARROW), f32), wg)
    square = plgpu.layout_cast(jnp.zeros((TILE, TILE), f32), wg)
    if D_ref is not None:
        plgpu.barrier_wait(barrier.at[0])
        Dv = plgpu.load(D_s.at[0], layout=cols_v)

    def step(indices, x_s, B_s, C_s, dt_s, dt_cols_s, cs_s, cs_cols_s, last_s, *rest):
        """One block: as the 64-dim walk's step, the state transposed (module docstring)."""
        *z_s, S = rest
        k = first + indices[0]
        t = pl.ds(k * TILE, TILE)
        if "states" in named:
            plgpu.copy_smem_to_gmem(S_s, named["states"].at[b, k, h, :, p])
        dt_r, cs_r = plgpu.load(dt_s, layout=rows_v), plgpu.load(cs_s, layout=rows_v)
        last_r = plgpu.load(last_s, layout=rows_v)

        def stage_update():
            x = plgpu.load(x_s, layout=wg).astype(f32)
            plgpu.wait_smem_to_gmem(int("states" in named), wait_read_only=True)
            E_s[...] = (x * on_rows(dt_r * jnp.exp(last_r - cs_r))).astype(dtype)
            plgpu.commit_smem()

        (CB,) = products((square,), [(C_s, B_s.transpose((1, 0)))], dims.interpret, stage_update)

        def diagonal():  # y's diagonal product W x, its left operand W formed in registers
            row = plgpu.broadcasted_iota(jnp.int32, (TILE, TILE), 0, layout=wg)
            col = plgpu.broadcasted_iota(jnp.int32, (TILE, TILE), 1, layout=wg)
            cs_c = plgpu.load(cs_cols_s, layout=cols_v)
            log_decay = lax.broadcast_in_dim(cs_r, (TILE, TILE), [0]) - on_cols(cs_c, width=TILE)
            dt_c = on_cols(plgpu.load(dt_cols_s, layout=cols_v), width=TILE)
            weights = CB * jnp.exp(jnp.minimum(log_decay, 0.0)) * dt_c
            return [(jnp.where(row >= col, weights, 0.0).astype(dtype), x_s)]

        # cs_last is the same at each of the block's positions: its first 32 scale Sᵀ's columns
        decay = jnp.exp(plgpu.load(last_s.at[pl.ds(0, NARROW)], layout=cols_v))
        carried = on_cols(decay, rows=n) * S
        pairs = [(B_s.transpose((1, 0)), E_s), (C_s, S_s)]  # the update Sᵀ += Bᵀ E, C Sᵀ
        S, CS, y = products((carried, zeros, zeros), pairs, dims.interpret, diagonal)
        y = y + on_rows(jnp.exp(cs_r)) * CS
        if D_ref is not None:
            y = y + on_cols(Dv) * plgpu.load(x_s, layout=wg).astype(f32)
        if Y_s is not None:
            Y_s[...] = y.astype(dtype)
        if z_s:
            z = plgpu.load(z_s[0], layout=wg).astype(f32)
            y = y * z / (1.0 + jnp.exp(-z))
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
        E_s[...] = y.astype(dtype)
        S_s[...] = S.astype(dtype)
        plgpu.commit_smem()
        if Y_s is not None:
            plgpu.copy_smem_to_gmem(Y_s, named["ypre"].at[b, t, h, p])
        plgpu.copy_smem_to_gmem(E_s, out_ref.at[b, t, h, p])
        return S

    def head_tile(ref):
        spec = plgpu.BlockSpec((TILE, NARROW), lambda j: (first + j, prog.part), transforms=NARROW_TRANSFORMS)
        return ref.at[b, :, h], spec

    def group_tile(ref):
        return ref.at[b, :, g], plgpu.BlockSpec((TILE, n), lambda j: (first + j, 0), transforms=NARROW_TRANSFORMS)

    def vector(ref):
        return ref.at[b, h], plgpu.BlockSpec((TILE,), lambda j: (first + j,))

    streams = [head_tile(x_ref), group_tile(B_ref), group_tile(C_ref)]
    streams += [vector(ref) for ref in (dt_ref, dt_ref, cs_ref, cs_ref, last_ref)]
    streams += [head_tile(z_ref)] if z_ref is not None else []
    walk_blocks(step, streams, S, prog, named.get("end"), stages, transposed=True)
