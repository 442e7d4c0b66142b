"""MambaVision's attention core (``modules.vit.attend``) on the XLA path against a float64 oracle, forward and the
gradients of q, k and v, at awkward token counts. (The cuDNN path: test_attention_gpu.py.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from jax_mamba.modules.vit import attend


def oracle(q, k, v, dout):
    """softmax(q k^T / sqrt(d)) v and its vjp in float64; arrays (batch, N, heads, head_dim)."""
    q, k, v, dout = (np.asarray(a, np.float64).transpose(0, 2, 1, 3) for a in (q, k, v, dout))
    scale = 1 / np.sqrt(q.shape[-1])
    s = q @ k.swapaxes(-1, -2) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = p @ v
    dp = dout @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq, dk, dv = ds @ k * scale, ds.swapaxes(-1, -2) @ q * scale, p.swapaxes(-1, -2) @ dout
    return [a.transpose(0, 2, 1, 3) for a in (out, dq, dk, dv)]


@pytest.mark.parametrize("tokens,heads,head_dim", [(1, 2, 8), (7, 3, 16), (49, 2, 40)])
def test_xla_attention_matches_oracle(rng, tokens, heads, head_dim):
    shape = (3, tokens, heads, head_dim)
    q, k, v, dout = (jnp.asarray(rng.normal(size=shape), jnp.float32) for _ in range(4))
    out, vjp = jax.vjp(jax.jit(lambda q, k, v: attend(q, k, v, "xla")), q, k, v)
    for name, got, expected in zip(("out", "dq", "dk", "dv"), (out, *vjp(dout)), oracle(q, k, v, dout), strict=True):
        assert np.all(np.isfinite(np.asarray(got))), name
        assert_close(name, got, expected, jnp.float32)
