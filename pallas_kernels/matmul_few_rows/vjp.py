"""The Pallas few-rows matmul as a differentiable function (``jax.custom_vjp``).

Arguments are pre-checked by ``api.matmul_few_rows``: x (M, K), w (K, N). Returns (M, N) in x.dtype. The backward
(rare: decoding does not differentiate) is XLA's two matmuls, with the reference's roundings."""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels._triton import next_pow2
from pallas_kernels.matmul_few_rows.config import MIN_ROWS, MatmulFewRowsConfig
from pallas_kernels.matmul_few_rows.heuristics import k_splits
from pallas_kernels.matmul_few_rows.kernel import FewRowsDims, matmul_partials


def few_rows_dims(x, w, config: MatmulFewRowsConfig, sm_count: int, interpret: bool) -> FewRowsDims:
    (rows, k), n = x.shape, w.shape[1]
    splits, steps = k_splits(n, k, config, sm_count)
    return FewRowsDims(
        rows=rows,
        k=k,
        n=n,
        padded_rows=max(MIN_ROWS, next_pow2(rows)),
        splits=splits,
        steps=steps,
        block_n=config.block_n,
        block_k=config.block_k,
        interpret=interpret,
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def matmul_few_rows(x, w, config: MatmulFewRowsConfig, sm_count: int, interpret: bool):
    dims = few_rows_dims(x, w, config, sm_count, interpret)
    partials = matmul_partials(x, w, dims, config.num_warps, config.num_stages)
    return (partials[0] if dims.splits == 1 else partials.sum(axis=0)).astype(x.dtype)


def _fwd(x, w, config, sm_count, interpret):
    return matmul_few_rows(x, w, config, sm_count, interpret), (x, w)


def _bwd(config, sm_count, interpret, residuals, g):
    x, w = residuals
    g = g.astype(x.dtype)
    dx = jnp.dot(g, w.astype(x.dtype).T, preferred_element_type=jnp.float32).astype(x.dtype)
    dw = jnp.dot(x.T, g, preferred_element_type=jnp.float32).astype(w.dtype)
    return dx, dw


matmul_few_rows.defvjp(_fwd, _bwd)
