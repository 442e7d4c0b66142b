"""On a GPU (marked ``gpu``): the compiled few-rows matmul at decoding shapes (the Mamba-2 780m layer's in_proj and
out_proj, batch 1 to 64, bf16), and at ragged ones, against the reference."""

import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import matmul_few_rows

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows", [1, 3, 16, 64])
@pytest.mark.parametrize("k, n", [(1536, 6448), (3072, 1536), (768, 3352), (97, 1000)])
def test_compiled_kernel_matches_reference(rng, rows, k, n):
    x = jnp.asarray(rng.normal(size=(rows, k)), jnp.bfloat16)
    w = jnp.asarray(rng.normal(size=(k, n)) / np.sqrt(k), jnp.bfloat16)
    got = matmul_few_rows(x, w, impl="pallas")
    assert not np.isnan(np.asarray(got, np.float32)).any()
    assert_close("out", got, matmul_few_rows(x, w), jnp.bfloat16)
