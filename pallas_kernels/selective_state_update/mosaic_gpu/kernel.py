"""The Mosaic GPU kernel of one decoding step of a selective SSM: the state read once and written once.

A step, for every (batch row, head), decays the whole state, adds a few rank-1 terms to it and reads the new state
out a few times:

    S' = decay ∘ S + sum_i a_i b_iᵀ,    y_j = S' q_j

with S (P, N), a_i (P,) and b_i, q_j (N,). The decay is a vector over P broadcast along N (exp(dt A) with A one value
a head: Mamba-2; Mamba-3's exp(ADT)), or exp(dt ⊗ A) with A a (P, N) tile of its own (Mamba-1). The selective state
update has one term (dt x, B) and one read-out (C); Mamba-3's SISO step two terms (the trapezoid's previous and
current inputs) and one read-out; its MIMO step of rank R 2R terms and R read-outs. XLA's fusion of the same step
reads S' a second time for the read-outs; at batch 64 of a 780m model the float32 state is 96 MiB a layer, so that
read is a third of the step's traffic.

One warpgroup a program: batch row b, head h, 64 of its P rows. TMA copies bring the (64, N) state tile, its rows'
vectors and the head's column vectors (and A's tile) into shared memory; the tile is computed in the WGMMA register
layout (vectors broadcast onto its rows and columns, the read-outs summed along its rows) and leaves by TMA from the
same buffer.

Layouts: state (batch, H, P, N) float32 or 16-bit, P a multiple of 64, N a multiple of 8; rows (batch, H, 1 + T, P)
float32: the decay (dt where A is given), then the T terms' a; cols (batch, H, T + R, N) float32: the T terms' b,
then the R read-outs' q; A (H, P, N) float32 or None. Returns the new state like ``state`` and y (batch, H, R, P)
float32.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import call_kernel

ROWS = 64  # state rows (head dims) a program: the WGMMA layout's tile height


@dataclasses.dataclass(frozen=True)
class StepDims:
    batch: int
    heads: int
    headdim: int  # P, a multiple of ROWS
    dstate: int  # N, a multiple of 8
    terms: int  # T: rank-1 terms added to the decayed state
    queries: int  # R: read-outs of the new state
    has_a: bool  # the decay is exp(dt ⊗ A) with A a (P, N) tile, not a vector over P
    interpret: bool


def covers(headdim: int, dstate: int) -> bool:
    """Whether the kernel takes a state of P head dims and N states: whole 64-row tiles, whole 8-column tiles of the
    WGMMA layout (whose rows of N float32 or 16-bit values then fill whole 16-byte units for the TMA copies)."""
    return headdim % ROWS == 0 and dstate % 8 == 0


def _step_kernel(state_ref, rows_ref, cols_ref, *refs, dims: StepDims):
    a_ref = refs[0] if dims.has_a else None
    new_ref, y_ref, s_smem, rows_smem, cols_smem, y_smem, *a_smem, bar = refs[dims.has_a :]
    b, h, p = lax.axis_index("batch"), lax.axis_index("heads"), lax.axis_index("rows")
    part = pl.ds(p * ROWS, ROWS)
    plgpu.copy_gmem_to_smem(state_ref.at[b, h, part], s_smem, bar)
    plgpu.copy_gmem_to_smem(rows_ref.at[b, h, :, part], rows_smem, bar)
    plgpu.copy_gmem_to_smem(cols_ref.at[b, h], cols_smem, bar)
    if a_ref is not None:
        plgpu.copy_gmem_to_smem(a_ref.at[h, part], a_smem[0], bar)
    plgpu.barrier_wait(bar)
    wg = plgpu.Layout.WGMMA
    rows_v, cols_v = wg.reduce(1), wg.reduce(0)
    shape = (ROWS, dims.dstate)

    def on_rows(i):
        return lax.broadcast_in_dim(plgpu.load(rows_smem.at[i], layout=rows_v), shape, [0])

    def on_cols(i):
        return lax.broadcast_in_dim(plgpu.load(cols_smem.at[i], layout=cols_v), shape, [1])

    decay = on_rows(0)
    if a_ref is not None:
        decay = jnp.exp(decay * plgpu.load(a_smem[0], layout=wg, optimized=False))
    state = decay * plgpu.load(s_smem, layout=wg, optimized=False).astype(jnp.float32)
    for i in range(dims.terms):
        state = state + on_rows(1 + i) * on_cols(i)
    s_smem[...] = state.astype(s_smem.dtype)
    for j in range(dims.queries):
        y_smem[j] = (state * on_cols(dims.terms + j)).sum(axis=1)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(s_smem, new_ref.at[b, h, part])
    plgpu.copy_smem_to_gmem(y_smem, y_ref.at[b, h, :, part])
    plgpu.wait_smem_to_gmem(0)


def state_step(
    state: jax.Array, rows: jax.Array, cols: jax.Array, queries: int, interpret: bool, A: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """The step (module docstring) by the kernel: (new state like ``state``, y (batch, H, R, P) float32)."""
    batch, heads, headdim, dstate = state.shape
    terms = rows.shape[2] - 1
    dims = StepDims(batch, heads, headdim, dstate, terms, queries, A is not None, interpret)
    f32 = jnp.float32
    return call_kernel(
        functools.partial(_step_kernel, dims=dims),
        [state, rows, cols] + ([] if A is None else [A]),
        out_type=(
            jax.ShapeDtypeStruct(state.shape, state.dtype),
            jax.ShapeDtypeStruct((batch, heads, queries, headdim), f32),
        ),
        scratch=[
            plgpu.SMEM((ROWS, dstate), state.dtype),
            plgpu.SMEM((1 + terms, ROWS), f32),
            plgpu.SMEM((terms + queries, dstate), f32),
            plgpu.SMEM((queries, ROWS), f32),
            *([] if A is None else [plgpu.SMEM((ROWS, dstate), f32)]),
            plgpu.Barrier(num_arrivals=3 + (A is not None)),
        ],
        grid=(batch, heads, headdim // ROWS),
        grid_names=("batch", "heads", "rows"),
        name="selective_state_step",
        interpret=interpret,
    )
