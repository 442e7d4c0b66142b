"""Multi-head attention for hybrid models: mamba-ssm's ``modules/mha.MHA`` (GQA, rotary, optional conv and MLP)."""

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.layers import CausalConv1d, linear


def apply_rotary(x: jax.Array, rotary_dim: int, base: float, interleaved: bool) -> jax.Array:
    """Rotary position embedding on the first ``rotary_dim`` features of x (batch, L, heads, head_dim).

    Non-interleaved (GPT-NeoX style) rotates the halves [x1, x2]; interleaved rotates pairs (x[2i], x[2i+1])."""
    seqlen = x.shape[1]
    inv_freq = 1.0 / (base ** (jnp.arange(0, rotary_dim, 2, dtype=jnp.float32) / rotary_dim))
    angles = jnp.arange(seqlen, dtype=jnp.float32)[:, None] * inv_freq  # (L, rotary_dim / 2)
    cos, sin = jnp.cos(angles)[None, :, None], jnp.sin(angles)[None, :, None]
    rot, rest = x[..., :rotary_dim].astype(jnp.float32), x[..., rotary_dim:]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rotated = jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).reshape(rot.shape)
    else:
        x1, x2 = jnp.split(rot, 2, axis=-1)
        rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return jnp.concatenate([rotated.astype(x.dtype), rest], axis=-1)


class MHA(nnx.Module):
    """in_proj -> [q (H hd), k (Hkv hd), v (Hkv hd), mlp]; optional depthwise conv over qkv; rotary on q, k;
    softmax attention (kv head j serves q heads j*H/Hkv ...); out_proj over [context, up * silu(gate)].

    Parameters: in_proj.kernel/bias, conv1d.weight/bias (d_conv > 0), out_proj.kernel/bias.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_heads_kv: int | None = None,
        head_dim: int | None = None,
        mlp_dim: int = 0,
        qkv_proj_bias: bool = True,
        out_proj_bias: bool = True,
        softmax_scale: float | None = None,
        causal: bool = True,
        d_conv: int = 0,
        rotary_emb_dim: int = 0,
        rotary_emb_base: float = 10000.0,
        rotary_emb_interleaved: bool = False,
        *,
        dtype=jnp.float32,
        impl: str = "auto",
        rngs: nnx.Rngs,
    ):
        self.num_heads = num_heads
        self.num_heads_kv = num_heads if num_heads_kv is None else num_heads_kv
        self.head_dim = embed_dim // num_heads if head_dim is None else head_dim
        self.mlp_dim = -(-mlp_dim // 256) * 256
        self.softmax_scale, self.causal = softmax_scale, causal
        self.rotary_emb_dim, self.rotary_emb_base = rotary_emb_dim, rotary_emb_base
        self.rotary_emb_interleaved = rotary_emb_interleaved
        self.qkv_dim = self.head_dim * (self.num_heads + 2 * self.num_heads_kv)
        self.in_proj = linear(embed_dim, self.qkv_dim + self.mlp_dim, bias=qkv_proj_bias, dtype=dtype, rngs=rngs)
        if d_conv > 0:
            self.conv1d = CausalConv1d(self.qkv_dim, d_conv, bias=True, rngs=rngs, impl=impl)
        self.d_conv = d_conv
        out_in = self.head_dim * self.num_heads + self.mlp_dim // 2
        self.out_proj = linear(out_in, embed_dim, bias=out_proj_bias, dtype=dtype, rngs=rngs)

    @jax.named_scope("attention")
    def __call__(self, x: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        """x (batch, L, embed_dim) -> (batch, L, embed_dim); seq_idx keeps attention within packed sequences."""
        batch, seqlen, _ = x.shape
        qkv = self.in_proj(x)
        if self.mlp_dim > 0:
            qkv, x_mlp = jnp.split(qkv, [self.qkv_dim], axis=-1)
            up, gate = jnp.split(x_mlp, 2, axis=-1)
            x_mlp = up * jax.nn.silu(gate)
        if self.d_conv > 0:
            qkv = self.conv1d(qkv, seq_idx=seq_idx)
        q_dim = self.num_heads * self.head_dim
        q = qkv[..., :q_dim].reshape(batch, seqlen, self.num_heads, self.head_dim)
        kv = qkv[..., q_dim:].reshape(batch, seqlen, 2, self.num_heads_kv, self.head_dim)
        k, v = kv[:, :, 0], kv[:, :, 1]
        if self.rotary_emb_dim > 0:
            rope = (self.rotary_emb_dim, self.rotary_emb_base, self.rotary_emb_interleaved)
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        mask = None if seq_idx is None else (seq_idx[:, :, None] == seq_idx[:, None, :])[:, None]
        context = jax.nn.dot_product_attention(q, k, v, mask=mask, scale=self.softmax_scale, is_causal=self.causal)
        context = context.reshape(batch, seqlen, q_dim)
        if self.mlp_dim > 0:
            context = jnp.concatenate([context, x_mlp], axis=-1)
        return self.out_proj(context)
