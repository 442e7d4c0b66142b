"""Pure-JAX selective state update: the ground truth of one decoding step of Mamba-1 and Mamba-2.

Layout with a heads axis (the api adds one of size 1 for Mamba-1's): state (batch, H, dim, N); x, dt, z
(batch, H, dim); A (H, dim, N); B, C (batch, G, N), head h reading group h // (H // G); D, dt_bias (H, dim).
Arithmetic is float32; the new state keeps state's dtype, out has x's dtype.
"""

import jax
import jax.numpy as jnp


def selective_state_update(
    state: jax.Array,
    x: jax.Array,
    dt: jax.Array,
    A: jax.Array,
    B: jax.Array,
    C: jax.Array,
    D: jax.Array | None = None,
    z: jax.Array | None = None,
    dt_bias: jax.Array | None = None,
    dt_softplus: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """h' = exp(dt A) h + dt B x; out = C h' + D x, gated by silu(z). Returns (out, new_state); arguments are
    pre-checked and in the layout above."""
    f32 = jnp.float32
    nheads, ngroups = state.shape[1], B.shape[1]
    dt = dt.astype(f32)
    if dt_bias is not None:
        dt = dt + dt_bias.astype(f32)
    if dt_softplus:
        dt = jax.nn.softplus(dt)
    B = jnp.repeat(B.astype(f32), nheads // ngroups, axis=1)[:, :, None, :]  # (batch, H, 1, N)
    C = jnp.repeat(C.astype(f32), nheads // ngroups, axis=1)[:, :, None, :]
    x32 = x.astype(f32)
    new_state = state.astype(f32) * jnp.exp(dt[..., None] * A.astype(f32)) + (dt * x32)[..., None] * B
    out = jnp.sum(new_state * C, axis=-1)
    if D is not None:
        out = out + x32 * D.astype(f32)
    if z is not None:
        out = out * jax.nn.silu(z.astype(f32))
    return out.astype(x.dtype), new_state.astype(state.dtype)
