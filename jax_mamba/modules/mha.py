"""Multi-head attention for hybrid models: mamba-ssm's ``modules/mha.MHA`` (GQA, rotary, optional conv and MLP)."""

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.impl import attention_impl
from jax_mamba.modules.layers import CausalConv1d, linear


def apply_rotary(x: jax.Array, rotary_dim: int, base: float, interleaved: bool, offset=0) -> jax.Array:
    """Rotary position embedding on the first ``rotary_dim`` features of x (batch, L, heads, head_dim), whose first
    position is ``offset`` (an int or an int scalar array: decoding).

    Non-interleaved (GPT-NeoX style) rotates the halves [x1, x2]; interleaved rotates pairs (x[2i], x[2i+1])."""
    seqlen = x.shape[1]
    inv_freq = 1.0 / (base ** (jnp.arange(0, rotary_dim, 2, dtype=jnp.float32) / rotary_dim))
    positions = offset + jnp.arange(seqlen, dtype=jnp.float32)
    angles = positions[:, None] * inv_freq  # (L, rotary_dim / 2)
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
        self.impl = impl
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
        qkv, x_mlp = self._in_proj(x)
        if self.d_conv > 0:
            qkv = self.conv1d(qkv, seq_idx=seq_idx)
        q, k, v = self._heads(qkv, 0)
        mask = None if seq_idx is None else (seq_idx[:, :, None] == seq_idx[:, None, :])[:, None]
        context = jax.nn.dot_product_attention(
            q, k, v, mask=mask, scale=self.softmax_scale, is_causal=self.causal,
            implementation=self.implementation(q.dtype, seqlen=q.shape[1], packed=seq_idx is not None),
        )  # fmt: skip
        return self._output(context, x_mlp)

    def implementation(self, dtype, seqlen: int = 2, packed: bool = False) -> str:
        """The attention that runs over a whole sequence: "cudnn" (cuDNN's flash attention, on a GPU where it takes
        the dtype and head_dim; see ``modules.impl.attention_impl``) or "xla". Packed sequences (a seq_idx mask) and
        odd lengths (JAX refuses cuDNN's causal attention over them in training) take the XLA path."""
        if packed or seqlen % 2:
            return "xla"
        return attention_impl(self.impl, dtype, self.head_dim)

    def _in_proj(self, x: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        """x (batch, L, embed_dim) -> qkv (batch, L, qkv_dim), and up * silu(gate) (batch, L, mlp_dim / 2) or None."""
        qkv = self.in_proj(x)
        if self.mlp_dim == 0:
            return qkv, None
        qkv, x_mlp = jnp.split(qkv, [self.qkv_dim], axis=-1)
        up, gate = jnp.split(x_mlp, 2, axis=-1)
        return qkv, up * jax.nn.silu(gate)

    def _heads(self, qkv: jax.Array, offset) -> tuple[jax.Array, jax.Array, jax.Array]:
        """qkv (batch, L, qkv_dim) -> q (batch, L, H, hd), k and v (batch, L, Hkv, hd), rotary applied to q and k
        from position ``offset``."""
        batch, seqlen, _ = qkv.shape
        q_dim = self.num_heads * self.head_dim
        q = qkv[..., :q_dim].reshape(batch, seqlen, self.num_heads, self.head_dim)
        kv = qkv[..., q_dim:].reshape(batch, seqlen, 2, self.num_heads_kv, self.head_dim)
        k, v = kv[:, :, 0], kv[:, :, 1]
        if self.rotary_emb_dim > 0:
            rope = (self.rotary_emb_dim, self.rotary_emb_base, self.rotary_emb_interleaved)
            q, k = apply_rotary(q, *rope, offset=offset), apply_rotary(k, *rope, offset=offset)
        return q, k, v

    def _output(self, context: jax.Array, x_mlp: jax.Array | None) -> jax.Array:
        """context (batch, L, H, hd) -> out_proj over [context, the MLP part]."""
        context = context.reshape(*context.shape[:2], self.num_heads * self.head_dim)
        if x_mlp is not None:
            context = jnp.concatenate([context, x_mlp], axis=-1)
        return self.out_proj(context)

    def prefill(self, x: jax.Array, max_len: int) -> tuple[jax.Array, dict]:
        """Inference over a prompt: x (batch, L, embed_dim) -> (output like __call__'s, cache) with cache {"k", "v":
        (batch, max_len, Hkv, hd), positions 0..L-1 filled (after rotary), "conv": (batch, d_conv - 1, qkv_dim) when
        the layer has a conv}. Decoding writes position L onwards, so max_len bounds prompt plus generated tokens."""
        if not self.causal:
            raise ValueError("MHA.prefill: decoding needs causal attention (attn_cfg.causal=True)")
        seqlen = x.shape[1]
        if max_len < seqlen:
            raise ValueError(f"MHA.prefill: max_len={max_len} must be >= the prompt's length {seqlen}")
        qkv, x_mlp = self._in_proj(x)
        cache = {}
        if self.d_conv > 0:
            qkv, cache["conv"] = self.conv1d.with_state(qkv)
        q, k, v = self._heads(qkv, 0)
        context = jax.nn.dot_product_attention(
            q, k, v, scale=self.softmax_scale, is_causal=True, implementation=self.implementation(q.dtype, seqlen)
        )
        pad = [(0, 0), (0, max_len - seqlen), (0, 0), (0, 0)]
        cache["k"], cache["v"] = jnp.pad(k, pad), jnp.pad(v, pad)
        return self._output(context, x_mlp), cache

    def step(self, x: jax.Array, cache: dict, pos: jax.Array) -> tuple[jax.Array, dict]:
        """One decoding position ``pos`` (int scalar, the same for every row): x (batch, 1, embed_dim) -> (output
        (batch, 1, embed_dim), the cache with this position's k and v written at ``pos``)."""
        qkv, x_mlp = self._in_proj(x)
        cache = dict(cache)
        if self.d_conv > 0:
            qkv, cache["conv"] = self.conv1d.with_state(qkv, cache["conv"])
        q, k, v = self._heads(qkv, pos)
        cache["k"] = jax.lax.dynamic_update_slice_in_dim(cache["k"], k.astype(cache["k"].dtype), pos, axis=1)
        cache["v"] = jax.lax.dynamic_update_slice_in_dim(cache["v"], v.astype(cache["v"].dtype), pos, axis=1)
        seen = (jnp.arange(cache["k"].shape[1]) <= pos)[None, None, None, :]  # (1, 1, 1, max_len)
        context = jax.nn.dot_product_attention(q, cache["k"], cache["v"], mask=seen, scale=self.softmax_scale)
        return self._output(context, x_mlp), cache
