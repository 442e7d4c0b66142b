"""The Mosaic GPU kernel of Mamba-3's decoding step: the state read once and written once.

One step of the recurrence, for every (batch row, head), is a decay of the whole state, a few rank-1 terms added to
it and a few read-outs of the new state:

    S' = decay S + sum_i a_i b_iᵀ,    y_j = S' q_j

with S (P, N), the decay a scalar, a_i (P,) and b_i, q_j (N,). SISO has two terms (the trapezoid's previous and
current inputs, v k_prevᵀ and v kᵀ with their weights folded into a_i) and one read-out; MIMO of rank R has 2R terms
and R read-outs. XLA's fusion of the same step reads S' a second time for the read-outs; at batch 64 of a 780m model
the float32 state is 96 MiB a layer, so that read is a third of the step's traffic.

One warpgroup a program: batch row b, head h, 64 of its P rows. TMA copies bring the (64, N) state tile, its rows'
vectors (the decay, then each a_i) and the head's column vectors (each b_i, then each q_j) into shared memory; the
tile is computed in the WGMMA register layout (vectors over rows and columns broadcast onto it, the read-outs summed
along its rows) and leaves by TMA from the same buffer.

Layouts: state (batch, H, P, N) float32 or 16-bit, P a multiple of 64, N a multiple of 8; rows (batch, H, 1 + T, P)
float32 (the decay broadcast over P, then the T terms' a); cols (batch, H, T + R, N) float32 (the T terms' b, then
the R queries). Returns the new state like ``state`` and y (batch, H, R, P) float32.
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
    interpret: bool


def covers(headdim: int, dstate: int) -> bool:
    """Whether the kernel takes a state of P head dims and N states: whole 64-row tiles, whole 8-column tiles of the
    WGMMA layout (whose rows of N float32 or 16-bit values then fill whole 16-byte units for the TMA copies)."""
    return headdim % ROWS == 0 and dstate % 8 == 0


def _step_kernel(state_ref, rows_ref, cols_ref, new_ref, y_ref, s_smem, rows_smem, cols_smem, y_smem, bar, *, dims):
    b, h, p = lax.axis_index("batch"), lax.axis_index("heads"), lax.axis_index("rows")
    part = pl.ds(p * ROWS, ROWS)
    plgpu.copy_gmem_to_smem(state_ref.at[b, h, part], s_smem, bar)
    plgpu.copy_gmem_to_smem(rows_ref.at[b, h, :, part], rows_smem, bar)
    plgpu.copy_gmem_to_smem(cols_ref.at[b, h], cols_smem, bar)
    plgpu.barrier_wait(bar)
    wg = plgpu.Layout.WGMMA
    rows_v, cols_v = wg.reduce(1), wg.reduce(0)
    shape = (ROWS, dims.dstate)

    def on_rows(i):
        return lax.broadcast_in_dim(plgpu.load(rows_smem.at[i], layout=rows_v), shape, [0])

    def on_cols(i):
        return lax.broadcast_in_dim(plgpu.load(cols_smem.at[i], layout=cols_v), shape, [1])

    state = on_rows(0) * plgpu.load(s_smem, layout=wg, optimized=False).astype(jnp.float32)
    for i in range(dims.terms):
        state = state + on_rows(1 + i) * on_cols(i)
    s_smem[...] = state.astype(s_smem.dtype)
    for j in range(dims.queries):
        y_smem[j] = (state * on_cols(dims.terms + j)).sum(axis=1)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(s_smem, new_ref.at[b, h, part])
    plgpu.copy_smem_to_gmem(y_smem, y_ref.at[b, h, :, part])
    plgpu.wait_smem_to_gmem(0)


def state_step(state: jax.Array, rows: jax.Array, cols: jax.Array, queries: int, interpret: bool):
    """The step (module docstring) by the kernel: (new state like ``state``, y (batch, H, R, P) float32)."""
    batch, heads, headdim, dstate = state.shape
    terms = rows.shape[2] - 1
    dims = StepDims(batch, heads, headdim, dstate, terms, queries, interpret)
    f32 = jnp.float32
    return call_kernel(
        functools.partial(_step_kernel, dims=dims),
        [state, rows, cols],
        out_type=(
            jax.ShapeDtypeStruct(state.shape, state.dtype),
            jax.ShapeDtypeStruct((batch, heads, queries, headdim), f32),
        ),
        scratch=[
            plgpu.SMEM((ROWS, dstate), state.dtype),
            plgpu.SMEM((1 + terms, ROWS), f32),
            plgpu.SMEM((terms + queries, dstate), f32),
            plgpu.SMEM((queries, ROWS), f32),
            plgpu.Barrier(num_arrivals=3),
        ],
        grid=(batch, heads, headdim // ROWS),
        grid_names=("batch", "heads", "rows"),
        name="mamba3_step",
        interpret=interpret,
    )
