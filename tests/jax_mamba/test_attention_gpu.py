"""On a GPU (marked ``gpu``): MambaVision's attention through cuDNN's flash attention, at the token counts and head
widths of MambaVision-T/-B windows (49, 64, 196 tokens; head_dim 40, 64), odd counts (padded for cuDNN) and a single
token, forward and the gradients of q, k and v against a float64 oracle."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import GRAD_FLOOR, assert_close
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


@pytest.mark.parametrize("seqlen", [1, 301, 2048])
def test_hybrid_attention_runs_cudnn_and_matches_xla(rng, seqlen):
    """The hybrid's MHA (GQA 8/2 heads of 64, rotary on 32 dims, causal) in bf16 takes cuDNN's flash attention (XLA's
    at odd lengths) and gives the XLA path's float32 output and gradients within bf16 rounding."""
    from flax import nnx

    from jax_mamba.modules.mha import MHA
    from tests.jax_mamba.test_modules import perturb

    def layer(impl, dtype):
        m = MHA(512, num_heads=8, num_heads_kv=2, rotary_emb_dim=32, dtype=dtype, impl=impl, rngs=nnx.Rngs(0))
        return perturb(m, np.random.default_rng(1), 0.02)

    fast, exact = layer("auto", jnp.bfloat16), layer("reference", jnp.float32)
    assert fast.implementation(jnp.bfloat16, seqlen) == ("xla" if seqlen % 2 else "cudnn")
    assert exact.implementation(jnp.float32, seqlen) == "xla"
    x = jnp.asarray(rng.normal(size=(2, seqlen, 512)), jnp.float32)
    loss = lambda m, x: jnp.sum(m(x).astype(jnp.float32) ** 2)  # noqa: E731
    out_fast, grad_fast = nnx.value_and_grad(loss, argnums=1)(fast, x.astype(jnp.bfloat16))
    out_exact, grad_exact = nnx.value_and_grad(loss, argnums=1)(exact, x)
    assert_close("loss", out_fast, out_exact, jnp.bfloat16)
    assert_close("dx", grad_fast, grad_exact, jnp.bfloat16)
