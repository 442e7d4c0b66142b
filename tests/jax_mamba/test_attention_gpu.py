"""On a GPU (marked ``gpu``): MambaVision's attention through cuDNN's flash attention, at the token counts and head
widths of MambaVision-T/-B windows (49, 64, 196 tokens; head_dim 40, 64), odd counts (padded for cuDNN) and a single
token, forward and the gradients of q, k and v against a float64 oracle."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.tolerances import GRAD_FLOOR, assert_close
from jax_mamba.modules.impl import attention_impl
from jax_mamba.modules.vit import attend
from tests.jax_mamba.test_attention import oracle

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tokens,heads,head_dim", [(49, 16, 40), (196, 8, 40), (64, 8, 64), (37, 4, 64), (1, 2, 16)])
def test_cudnn_attention_matches_oracle(rng, tokens, heads, head_dim):
    assert attention_impl("auto", jnp.bfloat16, head_dim) == "cudnn"
    shape = (6, tokens, heads, head_dim)
    q, k, v, dout = (jnp.asarray(rng.normal(size=shape), jnp.bfloat16) for _ in range(4))

    out, vjp = jax.vjp(jax.jit(lambda q, k, v: attend(q, k, v, "cudnn")), q, k, v)
    out = out.block_until_ready()
    grads = vjp(dout)
    want = oracle(q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32), dout.astype(jnp.float32))
    # With one token the softmax is constant: dq and dk are zero in exact arithmetic, so their rounding noise is
    # measured against the size of the gradient that does flow (dv), as GRAD_FLOOR does in the parity tables.
    floor = GRAD_FLOOR * 10 * float(np.linalg.norm(want[3]))
    for name, got, expected in zip(("out", "dq", "dk", "dv"), (out, *grads), want, strict=True):
        assert_close(name, got, expected, jnp.bfloat16, floor=floor if name in ("dq", "dk") else 0.0)
