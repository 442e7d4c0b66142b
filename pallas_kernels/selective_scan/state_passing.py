"""The chunked design's short passes between kernels (XLA): each boundary's true state or adjoint from what every
stretch of time does on its own (``triton.chunked_boundaries``). A stretch maps a boundary value v to
exp(A sum dt) * v + local (per state and channel); composing those maps along the stretches is a linear scan over
(batch, stretches, N, dim + 1) float32 arrays, run as ``lax.associative_scan``.
"""

import jax
import jax.numpy as jnp

from pallas_kernels._linear_scan import linear_scan
from pallas_kernels.selective_scan.layout import padded_rows


def _decays(A: jax.Array, dt_sums: jax.Array, flags: jax.Array | None) -> jax.Array:
    """exp(A sum dt) (batch, stretches, N, dim + 1) from A (dim, N) and sums (batch, stretches, dim), times
    ``flags`` (batch, stretches) where given: 0 for a stretch where a packed sequence starts (no state crosses it)."""
    A_rows = padded_rows(A.astype(jnp.float32).T)
    decays = jnp.exp(padded_rows(dt_sums)[:, :, None, :] * A_rows[None, None])
    return decays if flags is None else decays * flags[:, :, None, None]


def segment_start_states(ends: jax.Array, dt_sums: jax.Array, A: jax.Array, flags=None) -> jax.Array:
    """The state at every forward segment's start, (batch, nsegments, N, dim + 1): zero, then the composition of
    the segments before. ``flags`` (batch, nsegments - 1): as ``_decays``'."""
    batch, _, dstate, width = ends.shape
    _, through = linear_scan(_decays(A, dt_sums, flags), ends, axis=1)
    return jnp.concatenate([jnp.zeros((batch, 1, dstate, width), jnp.float32), through], axis=1)


def chunk_end_adjoints(starts: jax.Array, dt_sums: jax.Array, A: jax.Array, dlast: jax.Array, flags=None) -> jax.Array:
    """The adjoint right after every backward chunk, (batch, nchunks, N, dim + 1): d last_state after the last,
    before that the first step's adjoint of the next chunk. ``starts``/``dt_sums`` are chunks 1..'s
    (``chunk_start_adjoints``), ``dlast`` (batch, N, dim + 1); ``flags`` (batch, nchunks - 1): as ``_decays``'."""
    decays = _decays(A, dt_sums, flags)
    local = starts.at[:, -1].add(decays[:, -1] * dlast) if starts.shape[1] else starts
    _, after = linear_scan(decays, local, axis=1, reverse=True)
    return jnp.concatenate([after, dlast[:, None]], axis=1)
