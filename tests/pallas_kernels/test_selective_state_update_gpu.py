"""On a GPU (marked ``gpu``): the compiled selective-state-update kernels (Triton and Mosaic GPU) at decoding shapes
(Mamba-2 780m's layer with per-head values, Mamba-1 130m's), batch 1 and 64, under jit with the state donated,
against the reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import selective_state_update
from pallas_kernels.selective_state_update.config import StateUpdateConfig

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("backend", ["triton", "mosaic_gpu"])
@pytest.mark.parametrize("batch", [1, 64])
@pytest.mark.parametrize("layer", ["mamba2-780m", "mamba1-130m"])
def test_compiled_kernel_matches_reference(rng, batch, layer, backend):
    f = lambda *s, d=jnp.float32: jnp.asarray(rng.normal(size=s), d)  # noqa: E731
    if layer == "mamba2-780m":
        H, P, N, G = 48, 64, 128, 1
        state, x, z = f(batch, H, P, N), f(batch, H, P, d=jnp.bfloat16), f(batch, H, P, d=jnp.bfloat16)
        args = (state, x, f(batch, H, 1), -jnp.exp(f(H, 1, 1)), f(batch, G, N, d=jnp.bfloat16))
        args += (f(batch, G, N, d=jnp.bfloat16), f(H, 1), None, f(H, 1))
    else:
        dim, N = 1536, 16
        state, x, z = f(batch, dim, N), f(batch, dim, d=jnp.bfloat16), f(batch, dim, d=jnp.bfloat16)
        args = (state, x, f(batch, dim, d=jnp.bfloat16), -jnp.exp(f(dim, N)), f(batch, N, d=jnp.bfloat16))
        args += (f(batch, N, d=jnp.bfloat16), f(dim), z, f(dim))
    want = selective_state_update(*args, True)
    config = StateUpdateConfig(backend=backend)
    step = jax.jit(lambda *a: selective_state_update(*a, True, impl="pallas", config=config), donate_argnums=0)
    got = step(jnp.array(args[0]), *args[1:])
    assert not np.isnan(np.asarray(got[0], np.float32)).any()
    assert_close("out", got[0], want[0], jnp.bfloat16)
    assert_close("state", got[1], want[1], jnp.float32)
