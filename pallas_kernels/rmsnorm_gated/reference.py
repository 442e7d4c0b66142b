"""Pure-JAX gated RMSNorm: the ground truth for a Pallas norm kernel.

x, z (..., dim); weight, bias (dim,). With ``norm_before_gate``: out = rmsnorm(x) * w + b, then * silu(z);
otherwise x is gated first: out = rmsnorm(x * silu(z)) * w + b. The mean square runs over contiguous groups of
``group_size`` channels (the whole dim when None). Arithmetic is float32; out has x's dtype.
"""

import jax
import jax.numpy as jnp


def rmsnorm(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    z: jax.Array | None = None,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool = True,
) -> jax.Array:
    f32 = jnp.float32
    dim = x.shape[-1]
    group = dim if group_size is None else group_size
    h = x.astype(f32)
    if z is not None and not norm_before_gate:
        h = h * jax.nn.silu(z.astype(f32))
    grouped = h.reshape(*h.shape[:-1], dim // group, group)
    grouped = grouped * jax.lax.rsqrt(jnp.mean(jnp.square(grouped), axis=-1, keepdims=True) + eps)
    out = grouped.reshape(h.shape) * weight.astype(f32)
    if bias is not None:
        out = out + bias.astype(f32)
    if z is not None and norm_before_gate:
        out = out * jax.nn.silu(z.astype(f32))
    return out.astype(x.dtype)
