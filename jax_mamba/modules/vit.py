"""Vision-transformer building blocks as timm/NVlabs define them: multi-head self-attention over a token sequence
(MambaVision's ``Attention``) and timm's ``Mlp``. Tokens are (batch, N, dim); Linears start from torch's default
init."""

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.impl import attention_impl
from jax_mamba.modules.layers import LayerNorm, linear


def attend(q: jax.Array, k: jax.Array, v: jax.Array, implementation: str) -> jax.Array:
    """softmax(q k^T / sqrt(head_dim)) v, non-causal; q, k, v and the result (batch, N, heads, head_dim).

    ``implementation``: ``"xla"`` or ``"cudnn"`` (see ``modules.impl.attention_impl``). cuDNN's fused attention
    refuses odd token counts when it is differentiated (as JAX 0.11 calls it), and MambaVision's 7x7 windows hold 49
    tokens: such inputs get one zero token appended, which the padding mask (sequence lengths) keeps out of every
    softmax, and the padded query's output is dropped."""
    if implementation != "cudnn" or q.shape[1] % 2 == 0:
        return jax.nn.dot_product_attention(q, k, v, implementation=implementation)
    batch, tokens = q.shape[:2]
    pad = lambda t: jnp.pad(t, ((0, 0), (0, 1), (0, 0), (0, 0)))  # noqa: E731
    lengths = jnp.full((batch,), tokens, jnp.int32)
    out = jax.nn.dot_product_attention(
        pad(q), pad(k), pad(v), query_seq_lengths=lengths, key_value_seq_lengths=lengths, implementation="cudnn"
    )
    return out[:, :tokens]


class Attention(nnx.Module):
    """qkv (one Linear) -> heads -> optional LayerNorm on q and k -> softmax(q k^T / sqrt(head_dim)) v, non-causal,
    with dropout ``attn_drop`` on the probabilities in training -> proj -> dropout ``proj_drop``. Without attention
    dropout the softmax runs as cuDNN's flash attention where ``modules.impl.attention_impl`` allows it (``impl``
    "auto"/"pallas" on a GPU), else as XLA's.

    Parameters: qkv.kernel (dim, 3 dim), qkv.bias (qkv_bias), proj.kernel (dim, dim), proj.bias,
    q_norm.weight/bias and k_norm.weight/bias (head_dim,) when ``qk_norm``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = False,
        qk_norm: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        *,
        dtype=jnp.float32,
        impl: str = "auto",
        rngs: nnx.Rngs,
    ):
        if dim % num_heads:
            raise ValueError(f"num_heads={num_heads} must divide dim={dim}")
        self.num_heads, self.head_dim, self.impl = num_heads, dim // num_heads, impl
        self.qkv = linear(dim, 3 * dim, bias=qkv_bias, dtype=dtype, rngs=rngs)
        self.q_norm = LayerNorm(self.head_dim) if qk_norm else None
        self.k_norm = LayerNorm(self.head_dim) if qk_norm else None
        self.attn_drop = attn_drop
        self.deterministic = False
        self.proj = linear(dim, dim, bias=True, dtype=dtype, rngs=rngs)
        self.proj_drop = nnx.Dropout(proj_drop)

    @jax.named_scope("attention")
    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        """x (batch, N, dim) -> (batch, N, dim); ``rngs`` (a 'dropout' stream) only for dropout in training."""
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, self.head_dim)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (batch, N, heads, head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.attn_drop > 0 and not self.deterministic:
            if rngs is None:
                raise ValueError("attention dropout in training needs rngs with a 'dropout' stream")
            out = nnx.dot_product_attention(
                q, k, v, dropout_rng=rngs.dropout(), dropout_rate=self.attn_drop, broadcast_dropout=False
            )
        else:
            out = attend(q, k, v, attention_impl(self.impl, q.dtype, self.head_dim))
        out = self.proj(out.reshape(batch, tokens, dim))
        return self.proj_drop(out, rngs=rngs)


class Mlp(nnx.Module):
    """timm's ``Mlp``: fc1 -> GELU (exact erf form, torch's default) -> dropout -> fc2 -> dropout.

    Parameters: fc1.kernel (in, hidden), fc1.bias, fc2.kernel (hidden, out), fc2.bias."""

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int | None = None,
        drop: float = 0.0,
        *,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ):
        out_features = out_features or in_features
        self.fc1 = linear(in_features, hidden_features, bias=True, dtype=dtype, rngs=rngs)
        self.fc2 = linear(hidden_features, out_features, bias=True, dtype=dtype, rngs=rngs)
        self.drop = nnx.Dropout(drop)

    @jax.named_scope("mlp")
    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        x = self.drop(jax.nn.gelu(self.fc1(x), approximate=False), rngs=rngs)
        return self.drop(self.fc2(x), rngs=rngs)
