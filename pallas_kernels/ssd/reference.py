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

import dataclasses

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


@dataclasses.dataclass(frozen=True)
class Chunks:
    """The inputs cut into chunks of q steps (zero padded past L) and what the state pass needs, all float32:
    xc (b, c, q, g, hpg, p), dtc (b, c, q, g, hpg), Bc (b, c, q, g, n), cs (b, c, q, g, hpg) the in-chunk cumulative
    log-decay; with seq_idx, sc (b, c, q) the ids (edge padded), and per chunk the id of its last position and of
    the position before it (``last_seq``, ``prev_seq``, (b, c))."""

    xc: jax.Array
    dtc: jax.Array
    Bc: jax.Array
    cs: jax.Array
    sc: jax.Array | None
    last_seq: jax.Array | None
    prev_seq: jax.Array | None

    @property
    def from_start_mask(self) -> jax.Array | None:
        """(b, c, q, 1, 1): the positions still in the sequence of the state entering their chunk."""
        return None if self.sc is None else (self.sc == self.prev_seq[:, :, None])[:, :, :, None, None]


def cut_chunks(x, dt, A, B, seq_idx, q: int) -> Chunks:
    """``Chunks`` of x (batch, L, H, P), processed dt (batch, L, H) float32, A (H,), B (batch, L, G, N)."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups = B.shape[2]
    nchunks = -(-seqlen // q)
    pad = nchunks * q - seqlen

    def chunked(t, *, edge=False):  # (batch, L, ...) -> (batch, nchunks, q, ...); zero padding adds nothing.
        t = jnp.pad(t, [(0, 0), (0, pad)] + [(0, 0)] * (t.ndim - 2), mode="edge" if edge else "constant")
        return t.reshape(batch, nchunks, q, *t.shape[2:])

    hpg = nheads // ngroups
    xc = chunked(x.astype(jnp.float32)).reshape(batch, nchunks, q, ngroups, hpg, headdim)
    dtc = chunked(dt).reshape(batch, nchunks, q, ngroups, hpg)
    cs = jnp.cumsum(dtc * A.astype(jnp.float32).reshape(ngroups, hpg), axis=2)  # non-increasing in q
    sc = last_seq = prev_seq = None
    if seq_idx is not None:
        sc = chunked(seq_idx, edge=True)
        last_seq = sc[:, :, -1]
        prev_seq = jnp.concatenate([jnp.zeros_like(last_seq[:, :1]), last_seq[:, :-1]], axis=1)
    return Chunks(xc, dtc, chunked(B.astype(jnp.float32)), cs, sc, last_seq, prev_seq)


def incoming_states(ch: Chunks, initial_states: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    """(the state entering each chunk (b, c, g, hpg, p, n), the final state (b, g, hpg, p, n)): each chunk's own
    contribution at its last position, then a sequential pass across chunks (reset where the sequence changes)."""
    batch, _, _, ngroups, hpg, headdim = ch.xc.shape
    dstate = ch.Bc.shape[-1]
    to_end_mask = None if ch.sc is None else (ch.sc == ch.last_seq[:, :, None])[:, :, :, None, None]
    to_end = _exp_masked(ch.cs[:, :, -1:] - ch.cs, to_end_mask) * ch.dtc  # (b, c, q, g, hpg)
    states = jnp.einsum("bcsgn,bcsgh,bcsghp->bcghpn", ch.Bc, to_end, ch.xc, precision=HIGHEST)
    chunk_decay = jnp.exp(ch.cs[:, :, -1])  # (b, c, g, hpg)
    if ch.sc is not None:  # the incoming state survives a chunk only if the chunk ends in its sequence
        chunk_decay = jnp.where((ch.last_seq == ch.prev_seq)[:, :, None, None], chunk_decay, 0.0)
    if initial_states is None:
        state0 = jnp.zeros((batch, ngroups, hpg, headdim, dstate), jnp.float32)
    else:
        state0 = initial_states.astype(jnp.float32).reshape(batch, ngroups, hpg, headdim, dstate)

    def pass_state(state, inputs):
        decay_c, new_c = inputs
        return decay_c[..., None, None] * state + new_c, state

    final, incoming = jax.lax.scan(pass_state, state0, (jnp.moveaxis(chunk_decay, 1, 0), jnp.moveaxis(states, 1, 0)))
    return jnp.moveaxis(incoming, 0, 1), final


def final_state(x: jax.Array, dt: jax.Array, A: jax.Array, B: jax.Array) -> jax.Array:
    """The state after the last position from a zero state, without the outputs: per head h,
    final = sum_t exp(A_h sum_{s > t} dt_s) dt_t x_t ⊗ B_t, with dt already processed (``process_dt``, float32).

    One contraction over time per head (tensor-core GEMMs, operands in x's dtype, float32 accumulation), where the
    scan would also compute every output and, differentiated, their gradients. The decay sums run from the end
    (reversed cumulative sums), so the weights near the end, the largest, are the most exact. Returns (batch, H, P,
    N) float32."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    after = jnp.flip(jnp.cumsum(jnp.flip(dt, axis=1), axis=1), axis=1) - dt  # sum over s > t, (batch, L, H)
    weighted = x.astype(jnp.float32) * (jnp.exp(after * A) * dt)[..., None]
    hpg = nheads // ngroups
    state = _contract_over_time(weighted.reshape(batch, seqlen, ngroups, hpg, headdim), B.astype(x.dtype))
    return state.reshape(batch, nheads, headdim, dstate)


@jax.custom_vjp
def _contract_over_time(weighted: jax.Array, B: jax.Array) -> jax.Array:
    """Σ_t weighted_t ⊗ B_t: weighted (batch, L, G, heads per group, P) float32, rounded to B's dtype for the GEMM,
    B (batch, L, G, N); returns (batch, G, heads per group, P, N) float32.

    Its own VJP keeps weighted's cotangent in float32. Differentiated through a cast, that cotangent would leave the
    GEMM rounded to B's dtype, and dA and ddt multiply it by the sum of dt over the rest of the sequence, terms far
    larger than their sum: in bf16 at B2 L64 H4 that rounding alone put dA 1.5% (relative L2) from the exact one."""
    return _contract(weighted.astype(B.dtype), B)


def _contract(rounded: jax.Array, B: jax.Array) -> jax.Array:
    """The GEMM itself, on the weights already rounded to B's dtype, float32 accumulation."""
    return jnp.einsum("blghp,blgn->bghpn", rounded, B, precision=HIGHEST, preferred_element_type=jnp.float32)


def _contract_fwd(weighted, B):
    rounded = weighted.astype(B.dtype)
    return _contract(rounded, B), (rounded, B)


def _contract_bwd(residuals, cotangent):
    """weighted's cotangent in float32 (the point of this VJP); B's from the rounded weights, in B's dtype."""
    rounded, B = residuals
    dweighted = _exact_cotangent_dot("bghpn,blgn->blghp", cotangent, B)
    dB = _exact_cotangent_dot("bghpn,blghp->blgn", cotangent, rounded)
    return dweighted, dB.astype(B.dtype)


def _exact_cotangent_dot(spec: str, cotangent: jax.Array, operand: jax.Array) -> jax.Array:
    """einsum(spec, cotangent, operand) in float32. Against a bf16 operand, the float32 cotangent is split into its
    bf16 rounding and the rounding of the rest: two bf16 GEMMs (tensor cores) with float32 accumulation, about
    float32's accuracy (the operand is exact in bf16, and bf16 has float32's range). Other operands (float16, whose
    range a cotangent can exceed, and float32) meet the cotangent in float32."""
    f32 = jnp.float32
    if operand.dtype != jnp.bfloat16:
        return jnp.einsum(spec, cotangent, operand.astype(f32), precision=HIGHEST)
    high = cotangent.astype(operand.dtype)
    low = (cotangent - high.astype(f32)).astype(operand.dtype)
    dot = lambda part: jnp.einsum(spec, part, operand, precision=HIGHEST, preferred_element_type=f32)  # noqa: E731
    return dot(high) + dot(low)


_contract_over_time.defvjp(_contract_fwd, _contract_bwd)


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
    dstate = B.shape[3]
    q = chunk_size
    dt = process_dt(dt, dt_bias, dt_softplus, dt_limit)
    ch = cut_chunks(x, dt, A, B, seq_idx, q)
    nchunks = ch.xc.shape[1]
    Cc = jnp.pad(C.astype(f32), [(0, 0), (0, nchunks * q - seqlen), (0, 0), (0, 0)]).reshape(ch.Bc.shape)
    cs_t = jnp.moveaxis(ch.cs, 2, -1)  # (b, c, g, hpg, q)

    causal = jnp.tril(jnp.ones((q, q), bool))
    if ch.sc is None:
        intra_mask = causal
    else:
        same_seq = ch.sc[:, :, :, None] == ch.sc[:, :, None, :]  # (b, c, q, q)
        intra_mask = (causal & same_seq)[:, :, None, None]

    # Intra-chunk: y[l] = sum_{s<=l} (C_l . B_s) exp(cs_l - cs_s) dt_s x_s.
    cb = jnp.einsum("bclgn,bcsgn->bcgls", Cc, ch.Bc, precision=HIGHEST)
    decay = _exp_masked(cs_t[..., :, None] - cs_t[..., None, :], intra_mask)  # (b, c, g, hpg, l, s)
    scores = cb[:, :, :, None] * decay * jnp.moveaxis(ch.dtc, 2, -1)[..., None, :]
    y = jnp.einsum("bcghls,bcsghp->bclghp", scores, ch.xc, precision=HIGHEST)

    # Per-chunk states (the chunk's own contribution at its last position), then the pass across chunks.
    incoming, final = incoming_states(ch, initial_states)

    # Inter-chunk: y[l] += exp(cs_l) C_l . state_in, for positions still in the incoming state's sequence.
    from_start = _exp_masked(ch.cs, ch.from_start_mask)  # (b, c, q, g, hpg)
    y = y + jnp.einsum("bclgn,bcghpn->bclghp", Cc, incoming, precision=HIGHEST) * from_start[..., None]

    y = y.reshape(batch, nchunks * q, nheads, headdim)[:, :seqlen]
    if D is not None:
        d32 = D.astype(f32)
        y = y + x.astype(f32) * (d32[:, None] if D.ndim == 1 else d32)
    if z is not None:
        y = y * jax.nn.silu(z.astype(f32))
    return y.astype(x.dtype), final.reshape(batch, nheads, headdim, dstate)


def varlen_states(
    x: jax.Array,
    dt: jax.Array,
    A: jax.Array,
    B: jax.Array,
    cu_seqlens: jax.Array,
    chunk_size: int,
    initial_states: jax.Array | None = None,
    seq_idx: jax.Array | None = None,
) -> jax.Array:
    """The scan's state right after each packed sequence's last position, ``cu_seqlens[i + 1] - 1``:
    (num_sequences, H, P, N) float32, for batch 1. dt is processed (``process_dt``); cu_seqlens int
    (num_sequences + 1,), strictly increasing from 0 to L. The state resets only where seq_idx changes, as in the
    scan itself, so with seq_idx marking the same sequences each row is that sequence's own final state.

    Per sequence: its last position's chunk, the state entering that chunk (carried if still in its sequence)
    decayed to the position, plus the chunk's own steps up to the position that belong to its sequence."""
    _, _, nheads, headdim = x.shape
    q = chunk_size
    ch = cut_chunks(x, dt, A, B, seq_idx, q)
    incoming, _ = incoming_states(ch, initial_states)
    ends = cu_seqlens[1:].astype(jnp.int32) - 1
    chunk, pos = ends // q, ends % q
    cs = ch.cs[0, chunk]  # (nseq, q, g, hpg)
    cs_end = jnp.take_along_axis(cs, pos[:, None, None, None], axis=1)  # (nseq, 1, g, hpg)
    own = jnp.arange(q)[None, :] <= pos[:, None]  # (nseq, q): steps up to the end
    carry = jnp.exp(cs_end[:, 0])  # (nseq, g, hpg): decay from the chunk's start to the end
    if ch.sc is not None:
        ids = ch.sc[0, chunk]  # (nseq, q)
        end_id = jnp.take_along_axis(ids, pos[:, None], axis=1)  # (nseq, 1)
        own = own & (ids == end_id)
        carry = jnp.where((end_id[:, 0] == ch.prev_seq[0, chunk])[:, None, None], carry, 0.0)
    weights = _exp_masked(cs_end - cs, own[:, :, None, None]) * ch.dtc[0, chunk]  # (nseq, q, g, hpg)
    state = jnp.einsum("isgn,isgh,isghp->ighpn", ch.Bc[0, chunk], weights, ch.xc[0, chunk], precision=HIGHEST)
    state = state + carry[..., None, None] * incoming[0, chunk]
    return state.reshape(-1, nheads, headdim, B.shape[3])
