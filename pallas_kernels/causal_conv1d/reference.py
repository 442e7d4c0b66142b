"""Pure-JAX depthwise causal conv1d: the ground truth for a Pallas conv kernel.

Layout (channels last): x (batch, L, dim); weight (dim, width); bias (dim,); seq_idx int (batch, L);
initial/final states (batch, width - 1, dim). out[t] = bias + sum_k weight[:, k] * x[t - (width - 1) + k], taps
before the start read the initial states (zeros by default), taps in another sequence (seq_idx differs) read 0.
Arithmetic is float32; out has x's dtype.
"""

import jax
import jax.numpy as jnp


def causal_conv1d(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    seq_idx: jax.Array | None = None,
    initial_states: jax.Array | None = None,
    activation: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Returns (out (batch, L, dim) in x.dtype, final_states (batch, width - 1, dim) in x.dtype)."""
    batch, seqlen, dim = x.shape
    width = weight.shape[1]
    f32 = jnp.float32
    if initial_states is None:
        history = jnp.zeros((batch, width - 1, dim), x.dtype)
    else:
        history = initial_states.astype(x.dtype)
    padded = jnp.concatenate([history, x], axis=1)  # (batch, L + width - 1, dim)
    w32 = weight.astype(f32)
    out = (
        jnp.zeros((batch, seqlen, dim), f32)
        if bias is None
        else jnp.broadcast_to(bias.astype(f32), (batch, seqlen, dim))
    )
    if seq_idx is not None:
        seq_padded = jnp.concatenate([jnp.full((batch, width - 1), -1, seq_idx.dtype), seq_idx], axis=1)
    for k in range(width):
        tap = padded[:, k : k + seqlen].astype(f32)
        if seq_idx is not None:
            tap = jnp.where((seq_padded[:, k : k + seqlen] == seq_idx)[..., None], tap, 0.0)
        out = out + tap * w32[:, k]
    if activation in ("silu", "swish"):
        out = jax.nn.silu(out)
    return out.astype(x.dtype), padded[:, seqlen:]
