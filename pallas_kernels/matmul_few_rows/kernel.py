"""The Pallas kernel of the few-rows matmul: out_partial[s] = x[:, K_s] @ w[K_s, :] for each split s of K.

Grid (column blocks of ``block_n``, splits of K). A program walks its split in ``block_k`` steps: it loads x's
(rows padded to 16, block_k) tile and w's (block_k, block_n) tile (rows of w contiguous: coalesced), accumulates their
product on tensor cores in float32, and stores its (rows, block_n) float32 partial. The caller sums the splits. At
few rows the work is reading w once: K x N x itemsize bytes, so the grid is sized for memory parallelism (enough
programs per SM, each with ``num_stages`` tiles in flight), not for arithmetic.
Layouts: x (M, K), w (K, N) row-major; partials (splits, rows, N) float32.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu


@dataclasses.dataclass(frozen=True)
class FewRowsDims:
    rows: int  # M
    k: int
    n: int
    padded_rows: int  # M rounded up to a power of two >= 16
    splits: int
    steps: int  # block_k steps per split
    block_n: int
    block_k: int
    interpret: bool


def _kernel(x_ref, w_ref, out_ref, *, dims: FewRowsDims):
    j, s = pl.program_id(0), pl.program_id(1)
    n0 = j * dims.block_n
    rows = jnp.arange(dims.padded_rows)
    cols = n0 + jnp.arange(dims.block_n)
    row_mask, col_mask = rows < dims.rows, cols < dims.n

    def step(i, acc):
        k0 = (s * dims.steps + i) * dims.block_k
        ks = k0 + jnp.arange(dims.block_k)
        k_mask = ks < dims.k
        x = plgpu.load(
            x_ref.at[pl.ds(0, dims.padded_rows), pl.ds(k0, dims.block_k)],
            mask=row_mask[:, None] & k_mask[None, :],
            other=0,
        )
        w = plgpu.load(
            w_ref.at[pl.ds(k0, dims.block_k), pl.ds(n0, dims.block_n)],
            mask=k_mask[:, None] & col_mask[None, :],
            other=0,
        )
        return acc + jnp.dot(x, w.astype(x.dtype), preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, dims.steps, step, jnp.zeros((dims.padded_rows, dims.block_n), jnp.float32))
    plgpu.store(
        out_ref.at[s, pl.ds(0, dims.padded_rows), pl.ds(n0, dims.block_n)],
        acc,
        mask=row_mask[:, None] & col_mask[None, :],
    )


def matmul_partials(x: jax.Array, w: jax.Array, dims: FewRowsDims, num_warps: int, num_stages: int) -> jax.Array:
    """(splits, M, N) float32 partial products over the splits of K."""
    return pl.pallas_call(
        functools.partial(_kernel, dims=dims),
        out_shape=jax.ShapeDtypeStruct((dims.splits, dims.rows, dims.n), jnp.float32),
        grid=(pl.cdiv(dims.n, dims.block_n), dims.splits),
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        name="matmul_few_rows",
    )(x, w)
