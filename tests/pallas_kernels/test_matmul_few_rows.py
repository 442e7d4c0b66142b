"""matmul_few_rows: the Pallas kernel (interpreted here) against the reference and float64, on awkward shapes (one
row, K and N not multiples of the blocks, K split over several programs), forward and gradients, NaN propagation,
the split rule, and the argument checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import available_impls, matmul_few_rows
from pallas_kernels.matmul_few_rows.config import MatmulFewRowsConfig
from pallas_kernels.matmul_few_rows.heuristics import k_splits

SMALL = MatmulFewRowsConfig(block_n=16, block_k=16, programs_per_sm=4)  # several splits of K at small shapes


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 100, 70), (3, 48, 129), (17, 200, 16), (64, 37, 33)])
def test_kernel_matches_float64_and_the_reference(rng, dtype, shape):
    m, k, n = shape
    x = jnp.asarray(rng.normal(size=(m, k)), dtype)
    w = jnp.asarray(rng.normal(size=(k, n)) / np.sqrt(k), dtype)
    want = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    for config in (SMALL, None):
        got = matmul_few_rows(x, w, impl="pallas", config=config)
        assert got.shape == (m, n) and got.dtype == dtype
        assert not np.isnan(np.asarray(got, np.float32)).any()
        assert_close("out vs float64", np.asarray(got, np.float32), want, dtype)
        assert_close("out vs reference", got, matmul_few_rows(x, w), dtype)


def test_float32_weights_are_cast_to_the_rows_dtype(rng):
    x = jnp.asarray(rng.normal(size=(2, 40)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(40, 24)), jnp.float32)
    got = matmul_few_rows(x, w, impl="pallas", config=SMALL)
    assert got.dtype == jnp.bfloat16
    assert_close("out", got, matmul_few_rows(x, w), jnp.bfloat16)


@pytest.mark.parametrize("shape", [(1, 50, 20), (5, 33, 64)])
def test_gradients_match_the_reference(rng, shape):
    m, k, n = shape
    x = jnp.asarray(rng.normal(size=(m, k)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(k, n)), jnp.float32)
    g = jnp.asarray(rng.normal(size=(m, n)), jnp.float32)

    def grads(impl):
        out, vjp = jax.vjp(lambda x, w: matmul_few_rows(x, w, impl=impl, config=SMALL), x, w)
        return (out, *vjp(g))

    for name, got, want in zip(("out", "dx", "dw"), grads("pallas"), grads("reference"), strict=True):
        assert_close(name, got, want, jnp.float32)


def test_nan_in_a_row_reaches_only_that_row(rng):
    x = np.asarray(rng.normal(size=(3, 40)), np.float32)
    x[1, 17] = np.nan
    w = jnp.asarray(rng.normal(size=(40, 30)), jnp.float32)
    got = np.asarray(matmul_few_rows(jnp.asarray(x), w, impl="pallas", config=SMALL))
    assert np.isnan(got[1]).all() and not np.isnan(got[[0, 2]]).any()


@pytest.mark.parametrize("n, k", [(16, 16), (70, 1000), (6448, 1536), (1536, 3072), (50280, 1536), (10, 100000)])
def test_splits_cover_k_without_an_empty_split(n, k):
    config = MatmulFewRowsConfig()
    splits, steps = k_splits(n, k, config, sm_count=132)
    k_blocks = -(-k // config.block_k)
    assert splits >= 1 and steps >= 1
    assert splits * steps >= k_blocks > (splits - 1) * steps  # every K block in one split, the last split not empty
    column_blocks = -(-n // config.block_n)
    assert column_blocks * splits >= min(config.programs_per_sm * 132, column_blocks * k_blocks)  # the GPU filled


def test_arguments_are_checked():
    x, w = jnp.ones((2, 8)), jnp.ones((8, 4))
    assert available_impls(matmul_few_rows) == ("reference", "pallas")
    with pytest.raises(ValueError, match=r"w must have shape \(K, N\) with K = x.shape\[1\] = 8"):
        matmul_few_rows(x, jnp.ones((7, 4)))
    with pytest.raises(ValueError, match="x must have rank 2"):
        matmul_few_rows(jnp.ones((8,)), w)
    with pytest.raises(ValueError, match="at most 64 rows"):
        matmul_few_rows(jnp.ones((65, 8)), w, impl="pallas")
    with pytest.raises(ValueError, match="block_n must be a positive power of two"):
        matmul_few_rows(x, w, impl="pallas", config=MatmulFewRowsConfig(block_n=48))
    with pytest.raises(ValueError, match="impl must be one of"):
        matmul_few_rows(x, w, impl="triton")
    with pytest.raises(ValueError, match="x must be float32, bfloat16 or float16"):
        matmul_few_rows(jnp.ones((2, 8), jnp.int32), w)
