"""Pure-JAX chunked SSD (state-space duality): the ground truth for the Pallas SSD kernels.

Layout: x, z (batch, L, H, P); dt (batch, L, H); A (H,); B, C (batch, L, G, N) with head h reading group
h // (H // G); D (H,) or (H, P); initial and final states (batch, H, P, N) float32; seq_idx int (batch, L).

The decomposition is the one mamba-ssm's kernels use: per-chunk cumulative log-decay, intra-chunk (C·Bᵀ ∘ decay)·x,
per-chunk states, a sequential pass of states across chunks, and the inter-chunk term C·state. Every decay is the exp
of a masked difference of in-chunk cumulative sums, which is <= 0 for A < 0 and dt >= 0: exp never sees a large
positive argument. All arithmetic is float32; the output has x's dtype.

seq_idx (packed sequences): the state resets wherever seq_idx changes along L. The position before L = 0 counts as
sequence 0, so ``initial_states`` belongs to the sequence with id 0, as in mamba-ssm.
"""

import jax
import jax.numpy as jnp

HIGHEST = jax.lax.Precision.HIGHEST


def process_dt(dt: jax.Array, dt_bias: jax.Array | None, dt_softplus: bool, dt_limit: tuple[float, float]) -> jax.Array:
    """dt (batch, L, H) -> float32 dt + dt_bias, softplus if asked, then clamped to dt_limit (always, as mamba-ssm)."""
    dt = dt.astype(jnp.float32)
    if dt_bias is not None:
        dt = dt + dt_bias.astype(jnp.float32)
    if dt_softplus:
        dt = jax.nn.softplus(dt)
    return jnp.clip(dt, dt_limit[0], dt_limit[1])


def _exp_masked(log_decay: jax.Array, mask: jax.Array | None) -> jax.Array:
    """exp(log_decay) where mask, else 0; masked entries never reach exp (no inf * 0 in the gradient)."""
    if mask is None:
        return jnp.exp(log_decay)
    return jnp.exp(jnp.where(mask, log_decay, -jnp.inf))


def chunk_scan(
    x: jax.Array,
    dt: jax.Array,
    A: jax.Array,
    B: jax.Array,
    C: jax.Array,
    chunk_size: int,
    D: jax.Array | None = None,
    z: jax.Array | None = None,
    dt_bias: jax.Array | None = None,
    initial_states: jax.Array | None = None,
    seq_idx: jax.Array | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[jax.Array, jax.Array]:
    """Returns (out (batch, L, H, P) in x.dtype, final_states (batch, H, P, N) float32). Arguments are pre-checked."""
    f32 = jnp.float32
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    hpg = nheads // ngroups
    q = chunk_size
    nchunks = -(-seqlen // q)
    pad = nchunks * q - seqlen

    dt = process_dt(dt, dt_bias, dt_softplus, dt_limit)

    def chunked(t, *, edge=False):  # (batch, L, ...) -> (batch, nchunks, q, ...); zero padding adds nothing.
        t = jnp.pad(t, [(0, 0), (0, pad)] + [(0, 0)] * (t.ndim - 2), mode="edge" if edge else "constant")
        return t.reshape(batch, nchunks, q, *t.shape[2:])

    xc = chunked(x.astype(f32)).reshape(batch, nchunks, q, ngroups, hpg, headdim)
    dtc = chunked(dt).reshape(batch, nchunks, q, ngroups, hpg)
    Bc = chunked(B.astype(f32))
    Cc = chunked(C.astype(f32))
    cs = jnp.cumsum(dtc * A.astype(f32).reshape(ngroups, hpg), axis=2)  # (b, c, q, g, hpg), non-increasing in q
    cs_t = jnp.moveaxis(cs, 2, -1)  # (b, c, g, hpg, q)

    causal = jnp.tril(jnp.ones((q, q), bool))
    if seq_idx is None:
        same_seq = keep_state = prev_seq = last_seq = None
        intra_mask = causal
    else:
        sc = chunked(seq_idx, edge=True)  # (b, c, q)
        last_seq = sc[:, :, -1]
        prev_seq = jnp.concatenate([jnp.zeros_like(last_seq[:, :1]), last_seq[:, :-1]], axis=1)
        keep_state = last_seq == prev_seq  # (b, c): the incoming state survives this chunk
        same_seq = sc[:, :, :, None] == sc[:, :, None, :]  # (b, c, q, q)
        intra_mask = (causal & same_seq)[:, :, None, None]

    # Intra-chunk: y[l] = sum_{s<=l} (C_l . B_s) exp(cs_l - cs_s) dt_s x_s.
    cb = jnp.einsum("bclgn,bcsgn->bcgls", Cc, Bc, precision=HIGHEST)
    decay = _exp_masked(cs_t[..., :, None] - cs_t[..., None, :], intra_mask)  # (b, c, g, hpg, l, s)
    scores = cb[:, :, :, None] * decay * jnp.moveaxis(dtc, 2, -1)[..., None, :]
    y = jnp.einsum("bcghls,bcsghp->bclghp", scores, xc, precision=HIGHEST)

    # Per-chunk states (the chunk's own contribution at its last position), then the pass across chunks.
    to_end_mask = None if seq_idx is None else (sc == last_seq[:, :, None])[:, :, :, None, None]
    to_end = _exp_masked(cs[:, :, -1:] - cs, to_end_mask) * dtc  # (b, c, q, g, hpg)
    states = jnp.einsum("bcsgn,bcsgh,bcsghp->bcghpn", Bc, to_end, xc, precision=HIGHEST)
    chunk_decay = jnp.exp(cs[:, :, -1])  # (b, c, g, hpg)
    if keep_state is not None:
        chunk_decay = jnp.where(keep_state[:, :, None, None], chunk_decay, 0.0)

    if initial_states is None:
        state0 = jnp.zeros((batch, ngroups, hpg, headdim, dstate), f32)
    else:
        state0 = initial_states.astype(f32).reshape(batch, ngroups, hpg, headdim, dstate)

    def pass_state(state, inputs):
        decay_c, new_c = inputs
        return decay_c[..., None, None] * state + new_c, state

    final, incoming = jax.lax.scan(pass_state, state0, (jnp.moveaxis(chunk_decay, 1, 0), jnp.moveaxis(states, 1, 0)))
    incoming = jnp.moveaxis(incoming, 0, 1)  # (b, c, g, hpg, p, n): the state entering each chunk

    # Inter-chunk: y[l] += exp(cs_l) C_l . state_in, for positions still in the incoming state's sequence.
    from_start_mask = None if seq_idx is None else (sc == prev_seq[:, :, None])[:, :, :, None, None]
    from_start = _exp_masked(cs, from_start_mask)  # (b, c, q, g, hpg)
    y = y + jnp.einsum("bclgn,bcghpn->bclghp", Cc, incoming, precision=HIGHEST) * from_start[..., None]

    y = y.reshape(batch, nchunks * q, nheads, headdim)[:, :seqlen]
    if D is not None:
        d32 = D.astype(f32)
        y = y + x.astype(f32) * (d32[:, None] if D.ndim == 1 else d32)
    if z is not None:
        y = y * jax.nn.silu(z.astype(f32))
    return y.astype(x.dtype), final.reshape(batch, nheads, headdim, dstate)
