"""On a GPU (marked ``gpu``): the compiled Pallas gated RMSNorm at Mamba-2 layer shapes in bf16 (one group of 3072,
one of 5120 read in two column tiles, eight groups, the gate after the norm), forward and every gradient, against
the pure-JAX reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import rmsnorm_fn

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "rows,dim,groups,norm_before_gate",
    [(16384, 3072, 1, False), (4096, 5120, 1, False), (8192, 4096, 8, False), (4096, 1536, 1, True)],
)
def test_compiled_kernel_matches_reference(rng, rows, dim, groups, norm_before_gate):
    x = jnp.asarray(rng.normal(size=(rows, dim)), jnp.bfloat16)
    z = jnp.asarray(rng.normal(size=(rows, dim)), jnp.bfloat16)
    weight = jnp.asarray(rng.normal(1.0, 0.2, dim), jnp.float32)
    dout = jnp.asarray(rng.normal(size=(rows, dim)), jnp.bfloat16)

    def grads(impl):
        def run(x, w, z):
            return rmsnorm_fn(
                x, w, None, z, eps=1e-5, group_size=dim // groups, norm_before_gate=norm_before_gate, impl=impl
            )

        out, vjp = jax.vjp(jax.jit(run), x, weight, z)
        return [np.asarray(t.astype(jnp.float32)) for t in (out, *vjp(dout))]

    for name, got, want in zip(("out", "dx", "dweight", "dz"), grads("pallas"), grads("reference"), strict=True):
        assert_close(name, got, want, jnp.bfloat16)
