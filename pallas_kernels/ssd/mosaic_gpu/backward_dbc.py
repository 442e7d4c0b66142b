"""The backward's dB/dC kernel (``ssd_bwd_dbc``'s math) on Pallas's Mosaic GPU backend: one program per (batch row,
block of 64 positions, group, up to 128 of N's columns), one warpgroup, looping over the group's heads (and 64-dim
parts of a head) with ``emit_pipeline``: each step's tiles (x, dout, z, the block's incoming state S_in and the
gradient dS of its outgoing one) are copied into shared memory by TMA while the previous step computes.

Per step, with T = 64 positions i (rows) and j (columns), cs the block's cumulative dt·A (from XLA, as for
``mosaic_gpu.backward_dx``), dy = dout silu(z) and X = dt x:

    dCB += (dy Xᵀ) ∘ exp(cs_i - cs_j) on and below the diagonal          (registers, float32)
    dC  += (from_start ∘ dy) S_in,   dB += (to_end ∘ X) dS                 (two wgmma accumulators)

and once after the loop dC += dCB B, dB += dCBᵀ C (dCB in the dot dtype). The row scalings from_start = exp(cs_i)
and to_end = exp(cs_last - cs_j) (both <= 1) are applied to the dot operands, so that every head's state products
accumulate in the same two ``wgmma`` accumulators instead of registers; the Triton kernel scales each float32
product instead. dB and dC leave in B's and C's dtype: no float32 partials for XLA to sum.

The Triton kernel (``triton.backward._dbc_kernel``) reads the same bytes; at B1 L65536 H128 on an H100 it took 3.5 ms
against about 2.2 ms for its reads at the H100's 3.35 TB/s. With this kernel the backward's two Mosaic kernels took
7,966 us there against 5,352 + 3,523 with the Triton dB/dC kernel (H100, profiler). At N 256 (two column tiles
re-read x, dout and the states) and at P 128 (two pipeline steps a head) it loses to the Triton kernel, so
``default_config`` keeps it to N <= 128, P 64 (``docs/kernels.md#ssd-on-mosaic-gpu``).

Covered shapes (``mosaic_dbc_supported``): block_l 64, head dims and N multiples of 64 (N <= 256, in column tiles of
``SsdConfig.bwd_dbc_columns``, 64 or 128), L a multiple of 64, 16-bit inputs, no seq_idx. Elsewhere the Triton
kernel runs.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import sigmoid
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.mosaic_gpu.common import TILE, TRANSFORMS, call_kernel, covers_tiles

STEPS_IN_FLIGHT = 2  # pipeline stages: one step's copies in flight while the previous one computes


def mosaic_dbc_supported(dims: SsdDims, dtype, columns: int = 128) -> bool:
    """Whether the Mosaic GPU kernel covers this problem with ``columns`` of N a program (else the Triton kernel
    runs): N fits one program's columns or divides into them."""
    return covers_tiles(dims, dtype) and (dims.dstate <= columns or dims.dstate % columns == 0)


def ssd_bwd_dbc_mosaic(*refs, dims: SsdDims, parts: int, columns: int):
    """One (batch row, block, group, columns of N): the loop over the group's heads, then dCB's products and the
    stores (module docstring)."""
    n_in = 9 + dims.has_z
    ins, (dB_ref, dC_ref), scratch = refs[:n_in], refs[n_in : n_in + 2], refs[n_in + 2 :]
    x_ref, dout_ref, *z_ref, dt_ref, cs_ref, end_ref, states_ref, dstates_ref, B_ref, C_ref = ins
    dy_s, dyf_s, X_s, Xe_s, dcb_s, B_s, C_s, barriers = scratch

    gc, k, b = lax.axis_index("gc"), lax.axis_index("block"), lax.axis_index("batch")
    col_tiles = dims.dstate // columns
    g, c = gc // col_tiles, gc % col_tiles
    t, n = pl.ds(k * TILE, TILE), pl.ds(c * columns, columns)
    heads = pl.ds(g * dims.heads_per_group, dims.heads_per_group)
    f32, dtype = jnp.float32, dy_s.dtype
    wg = plgpu.Layout.WGMMA
    rows_v, cols_v = wg.reduce(1), wg.reduce(0)
    on_rows = lambda v: lax.broadcast_in_dim(v, (TILE, TILE), [0])  # noqa: E731
    on_cols = lambda v: lax.broadcast_in_dim(v, (TILE, TILE), [1])  # noqa: E731
    plgpu.copy_gmem_to_smem(B_ref.at[b, t, g, n], B_s, barriers.at[0])
    plgpu.copy_gmem_to_smem(C_ref.at[b, t, g, n], C_s, barriers.at[1])
    row = plgpu.broadcasted_iota(jnp.int32, (TILE, TILE), 0, layout=wg)
    col = plgpu.broadcasted_iota(jnp.int32, (TILE, TILE), 1, layout=wg)

    def run(dC_acc, dB_acc):
        def step(_, x_s, dout_s, *rest):
            """One head's 64 dims: stage dy, from_start ∘ dy, X and to_end ∘ X, then dCB's share and the state
            products."""
            *z_s, dt_s, cs_s, cs_cols_s, end_s, S_s, dS_s, dCB = rest
            dout = plgpu.load(dout_s, layout=wg).astype(f32)
            if z_s:
                z = plgpu.load(z_s[0], layout=wg).astype(f32)
                dout = dout * z * sigmoid(z)
            dy = dout.astype(dtype).astype(f32)
            cs = plgpu.load(cs_s, layout=rows_v)
            X = plgpu.load(x_s, layout=wg).astype(f32) * on_rows(plgpu.load(dt_s, layout=rows_v))
            X = X.astype(dtype).astype(f32)
            dy_s[...] = dy.astype(dtype)
            dyf_s[...] = (dy * on_rows(jnp.exp(cs))).astype(dtype)
            X_s[...] = X.astype(dtype)
            Xe_s[...] = (X * on_rows(jnp.exp(plgpu.load(end_s, layout=rows_v)))).astype(dtype)
            plgpu.commit_smem()

            def scores(dM_acc):
                plgpu.wgmma(dM_acc, dy_s, X_s.transpose((1, 0)))  # [i, j] = dy_i · X_j
                return dM_acc[...]

            dM = pl.run_scoped(scores, plgpu.ACC((TILE, TILE), f32))
            log_decay = on_rows(cs) - on_cols(plgpu.load(cs_cols_s, layout=cols_v))
            # (an overflow above the diagonal, where cs_i > cs_j, is selected away)
            dCB = dCB + jnp.where(row >= col, dM * jnp.exp(log_decay), 0.0)
            plgpu.wgmma(dC_acc, dyf_s, S_s)
            plgpu.wgmma(dB_acc, Xe_s, dS_s)
            plgpu.wgmma_wait(0)  # before the next step overwrites the staged operands and this step's buffers
            return dCB

        head_tile = plgpu.BlockSpec((TILE, None, TILE), lambda i: (0, i // parts, i % parts), transforms=TRANSFORMS)
        head_vector = plgpu.BlockSpec((None, TILE), lambda i: (i // parts, 0))
        state_tile = plgpu.BlockSpec((None, TILE, columns), lambda i: (i // parts, i % parts, 0), transforms=TRANSFORMS)
        streams = [(x_ref.at[b, t, heads], head_tile), (dout_ref.at[b, t, heads], head_tile)]
        streams += [(z_ref[0].at[b, t, heads], head_tile)] if z_ref else []
        streams += [(ref.at[b, heads, t], head_vector) for ref in (dt_ref, cs_ref, cs_ref, end_ref)]
        streams += [(ref.at[b, k, heads, :, n], state_tile) for ref in (states_ref, dstates_ref)]
        dCB = plgpu.emit_pipeline(
            step,
            grid=(dims.heads_per_group * parts,),
            in_specs=[spec for _, spec in streams],
            max_concurrent_steps=STEPS_IN_FLIGHT,
            init_carry=plgpu.layout_cast(jnp.zeros((TILE, TILE), f32), wg),
        )(*[src for src, _ in streams])
        dcb_s[...] = dCB.astype(dtype)
        plgpu.commit_smem()
        plgpu.barrier_wait(barriers.at[0])
        plgpu.barrier_wait(barriers.at[1])
        plgpu.wgmma(dC_acc, dcb_s, B_s)
        plgpu.wgmma(dB_acc, dcb_s.transpose((1, 0)), C_s)
        return dC_acc[...], dB_acc[...]

    dC, dB = pl.run_scoped(run, plgpu.ACC((TILE, columns), f32), plgpu.ACC((TILE, columns), f32))
    C_s[...] = dC.astype(dtype)  # dC, stored from C's buffer (the products that read it are done)
    B_s[...] = dB.astype(dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(C_s, dC_ref.at[b, t, g, n], commit_group=False)
    plgpu.copy_smem_to_gmem(B_s, dB_ref.at[b, t, g, n], commit_group=False)
    plgpu.commit_smem_to_gmem_group()
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)


def mosaic_dbc(x, decays, B, C, z, states, dstates, dout, dims: SsdDims, columns: int = 128):
    """dB and dC (batch, L, G, N) in B's and C's dtype by the Mosaic GPU kernel, from x, dout, z (batch, L, H, P)
    and B, C (batch, L, G, N) in one 16-bit dtype, ``decays`` = ``block_decays(dt, A, dt_bias, dims)`` (dt after
    bias and softplus, cs and cs_last - cs, each (batch, H, L) float32) and states, dstates (batch, nblocks, H, P,
    N), each block's incoming state and the gradient of its outgoing one; up to ``columns`` (64 or 128) of N per
    program: 128 reads each head's x, dout and z half as often, 64 holds half the accumulator registers."""
    batch, seqlen, _, headdim = x.shape
    parts, nblocks = headdim // TILE, seqlen // TILE
    columns = min(dims.dstate, columns)
    dt_p, cs, to_end = decays
    tile16 = lambda shape: plgpu.SMEM(shape, x.dtype, transforms=TRANSFORMS)  # noqa: E731
    scratch = [
        tile16((TILE, TILE)),  # dy
        tile16((TILE, TILE)),  # from_start ∘ dy
        tile16((TILE, TILE)),  # X = dt x
        tile16((TILE, TILE)),  # to_end ∘ X
        tile16((TILE, TILE)),  # dCB
        tile16((TILE, columns)),  # B, then dB
        tile16((TILE, columns)),  # C, then dC
        plgpu.Barrier(num_barriers=2),  # B's and C's copies
    ]
    inputs = [x, dout] + ([z] if z is not None else [])
    inputs += [dt_p, cs, to_end, states.astype(x.dtype), dstates.astype(x.dtype), B, C]
    return call_kernel(
        functools.partial(ssd_bwd_dbc_mosaic, dims=dims, parts=parts, columns=columns),
        inputs,
        out_type=[jax.ShapeDtypeStruct(B.shape, B.dtype), jax.ShapeDtypeStruct(C.shape, C.dtype)],
        scratch=scratch,
        grid=(dims.ngroups * (dims.dstate // columns), nblocks, batch),
        grid_names=("gc", "block", "batch"),
        name="ssd_bwd_dbc",
        dims=dims,
    )
