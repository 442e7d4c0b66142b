"""The layout of the selective scan's (state, channel) arrays in HBM, shared by the kernels and the passes between
them: every (N, dim) array has its rows padded to dim + 1 (``padded_rows``); A is read as A log2(e) transposed to
(N, dim + 1) (``a2_transposed``).
"""

import jax
import jax.numpy as jnp

from pallas_kernels._triton import LOG2_E


def padded_rows(x: jax.Array) -> jax.Array:
    """(..., N, dim) -> (..., N, dim + 1): the layout of every (state, channel) array the kernels read or write.

    The odd row stride keeps Triton from vectorizing these tile loads and stores along channels, so it lays the
    state tile out with each thread owning whole channels (all N states) and lanes along channels. That layout
    makes the per-step sums over N thread-local and matches the per-step channel vectors (no layout conversion,
    hence no barrier, in the time loop)."""
    return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, 1)])


def a2_transposed(A: jax.Array) -> jax.Array:
    """A (dim, N) -> A log2(e) as padded (N, dim + 1), the kernels' layout."""
    return padded_rows((A.astype(jnp.float32) * LOG2_E).T)
