"""Pure-JAX Mamba-3 SISO, the ground truth for its kernels: chunked for the sequence, recurrent for a decoding step.

Per batch row and head h (head h reads Q/K group h // (H / G)), with sigma_t = sigmoid(Trap_t), Delta_t = DT_t and
alpha_t = exp(ADT_t), a trapezoidal discretization of a state S_t (headdim_v x d_state):

    theta_t = theta_{t-1} + pi tanh(Angles_t) Delta_t                  (S angles, kept modulo 2 pi)
    q_t = R(theta_t) (Q_t + Q_bias),   k_t = R(theta_t) (K_t + K_bias)  (R turns feature pairs (2j, 2j + 1), j < S)
    S_t = alpha_t S_{t-1} + alpha_t Delta_t (1 - sigma_t) v_{t-1} k_{t-1}^T + Delta_t sigma_t v_t k_t^T
    out_t = (S_t q_t + D v_t) silu(Z_t)

The step before the first reads the input states (theta, S, k, v), zeros without them. Chunked, an input v_j k_j^T
enters every later step t of its chunk with weight exp(ADT_{j+1} + ... + ADT_t) scale_j, where scale_j = Delta_j
sigma_j + Delta_{j+1} (1 - sigma_{j+1}) (the second term 0 at the last step); a chunk hands the next the state with
its last step's next-step term already in, so the next chunk's decays apply to it as to the state. Arithmetic is
float32 (float64 where V is float64: the tests' exact answer); out comes back in V's dtype.
"""

import itertools

import jax
import jax.numpy as jnp
from jax import lax

TWO_PI = 2 * jnp.pi


def arithmetic_dtype(dtype) -> jnp.dtype:
    """float64 for float64 inputs, float32 for every other dtype."""
    return jnp.dtype(jnp.float64) if jnp.dtype(dtype) == jnp.float64 else jnp.dtype(jnp.float32)


def rotate_pairs(x: jax.Array, theta: jax.Array) -> jax.Array:
    """x (..., N) with its feature pairs (2j, 2j + 1), j < S, turned by theta (..., S); the rest unchanged."""
    pairs = theta.shape[-1]
    head = x[..., : 2 * pairs].reshape(*x.shape[:-1], pairs, 2)
    a, b = head[..., 0], head[..., 1]
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    turned = jnp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(*x.shape[:-1], 2 * pairs)
    return jnp.concatenate([turned, x[..., 2 * pairs :]], axis=-1)


def angle_increments(angles: jax.Array, dt: jax.Array, compute=jnp.float32) -> jax.Array:
    """pi tanh(angles) Delta: angles (..., H, S), dt (..., H) -> (..., H, S) in ``compute`` (the arithmetic dtype)."""
    return jnp.pi * jnp.tanh(angles.astype(compute)) * dt.astype(compute)[..., None]


def cumulative_angles(
    angles: jax.Array, dt: jax.Array, initial: jax.Array | None, chunk: int, compute=jnp.float32
) -> jax.Array:
    """theta (batch, L, H, S) in ``compute`` modulo 2 pi: angles (batch, L, H, S), dt (batch, H, L), initial (batch, H,
    S). Summed within chunks and carried between them modulo 2 pi, so that float32 keeps its precision at any L."""
    batch, seqlen, heads, pairs = angles.shape
    inc = angle_increments(angles, jnp.swapaxes(dt, 1, 2), compute)
    chunks = -(-seqlen // chunk)
    inc = jnp.pad(inc, ((0, 0), (0, chunks * chunk - seqlen), (0, 0), (0, 0)))
    local = jnp.cumsum(inc.reshape(batch, chunks, chunk, heads, pairs), axis=2)
    start = jnp.zeros((batch, heads, pairs), compute) if initial is None else initial.astype(compute)

    def carry(offset, total):
        return jnp.mod(offset + total, TWO_PI), offset

    _, offsets = lax.scan(carry, start, jnp.moveaxis(local[:, :, -1], 1, 0))
    theta = jnp.mod(jnp.moveaxis(offsets, 0, 1)[:, :, None] + local, TWO_PI)
    return theta.reshape(batch, chunks * chunk, heads, pairs)[:, :seqlen]


def _per_head(x: jax.Array, heads: int, compute) -> jax.Array:
    """(..., G, N) -> (..., H, N) in ``compute``, head h reading group h // (H / G)."""
    return jnp.repeat(x.astype(compute), heads // x.shape[-2], axis=-2)


def _pad_time(x: jax.Array, axis: int, extra: int) -> jax.Array:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths)


def mamba3_siso(
    Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, states=None, chunk_size: int = 64
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """out (batch, L, H, P) in V's dtype, and the final states (angle (batch, H, S), ssm (batch, H, P, N), k (batch,
    H, N), all in the arithmetic dtype, v (batch, H, P) in V's dtype). Layouts as ``api.mamba3_siso_combined``;
    ``states`` the input (angle, ssm, k, v) or None."""
    compute = arithmetic_dtype(V.dtype)
    batch, seqlen, heads, _ = V.shape
    chunk = chunk_size
    chunks = -(-seqlen // chunk)
    extra = chunks * chunk - seqlen
    angle0, ssm0, k0, v0 = (None,) * 4 if states is None else states
    theta = cumulative_angles(Angles, DT, angle0, chunk, compute)
    q = rotate_pairs(_per_head(Q, heads, compute) + Q_bias.astype(compute), theta)  # (batch, L, H, N)
    k = rotate_pairs(_per_head(K, heads, compute) + K_bias.astype(compute), theta)
    v = V.astype(compute)
    sigma, dt, adt = jax.nn.sigmoid(Trap.astype(compute)), DT.astype(compute), ADT.astype(compute)  # (batch, H, L)
    gamma = dt * sigma
    before = dt * (1 - sigma)  # the weight of step t - 1's input at step t, before its decay
    scale = gamma + jnp.concatenate([before[..., 1:], jnp.zeros_like(before[..., :1])], axis=-1)

    def chunked(x, time_axis):  # pad L to whole chunks (inputs of weight 0, decay 1) and split it
        x = _pad_time(x, time_axis, extra)
        return x.reshape(*x.shape[:time_axis], chunks, chunk, *x.shape[time_axis + 1 :])

    qc, kc, vc = (chunked(jnp.swapaxes(a, 1, 2), 2) for a in (q, k, v))  # (batch, H, chunks, chunk, .)
    gc, sc, ac = (chunked(a, 2) for a in (gamma, scale, adt))  # (batch, H, chunks, chunk)
    cum = jnp.cumsum(ac, axis=-1)
    causal = jnp.tril(jnp.ones((chunk, chunk), bool), -1)
    gap = jnp.where(causal, cum[..., :, None] - cum[..., None, :], 0.0)
    decay = jnp.where(causal, jnp.exp(gap), 0.0)  # [t, j]: exp(ADT_{j+1} + ... + ADT_t), j < t
    scores = jnp.einsum("bhctn,bhcjn->bhctj", qc, kc) * decay * sc[..., None, :]
    within = jnp.einsum("bhctj,bhcjp->bhctp", scores, vc)
    skip = gc * jnp.sum(qc * kc, axis=-1)
    if D is not None:
        skip = skip + D.astype(compute)[None, :, None, None]
    within = within + skip[..., None] * vc

    to_end = jnp.exp(cum[..., -1:] - cum) * sc  # weight of each input in the state the chunk hands on
    handed = jnp.einsum("bhct,bhctp,bhctn->bhcpn", to_end, vc, kc)
    state = jnp.zeros((batch, heads, V.shape[-1], Q.shape[-1]), compute) if ssm0 is None else ssm0.astype(compute)
    if v0 is not None:
        state = state + before[..., 0, None, None] * jnp.einsum("bhp,bhn->bhpn", v0.astype(compute), k0.astype(compute))

    def walk(s, chunk_inputs):
        chunk_decay, added = chunk_inputs
        return chunk_decay[..., None, None] * s + added, s

    final, starts = lax.scan(walk, state, (jnp.moveaxis(jnp.exp(cum[..., -1]), 2, 0), jnp.moveaxis(handed, 2, 0)))
    starts = jnp.moveaxis(starts, 0, 2)  # (batch, H, chunks, P, N): the state before each chunk
    carried = jnp.exp(cum)[..., None] * jnp.einsum("bhcpn,bhctn->bhctp", starts, qc)
    out = (within + carried).reshape(batch, heads, chunks * chunk, -1)[:, :, :seqlen]
    out = jnp.swapaxes(out, 1, 2)  # (batch, L, H, P)
    if Z is not None:
        out = out * jax.nn.silu(Z.astype(compute))
    finals = (theta[:, -1], final, k[:, -1], V[:, -1])
    return out.astype(V.dtype), finals


def mamba3_siso_packed(
    Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, states, chunk_size: int, bounds: tuple[int, ...]
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """Sequences packed along L (batch 1; sequence i holds steps bounds[i] to bounds[i + 1] - 1), each run from its
    own input states (``states``' leading axis the sequence, None: zeros) in chunks aligned to its first step, as
    mamba-ssm's ``cu_seqlens``. Returns out (1, L, H, P) and the final states, the sequence as their leading axis."""
    outs, finals = [], []
    for i, (start, end) in enumerate(itertools.pairwise(bounds)):

        def steps(x, axis, start=start, end=end):
            return None if x is None else lax.slice_in_dim(x, start, end, axis=axis)

        own = None if states is None else tuple(s[i : i + 1] for s in states)
        sequence = [steps(Q, 1), steps(K, 1), steps(V, 1), steps(ADT, 2), steps(DT, 2), steps(Trap, 2)]
        out, final = mamba3_siso(*sequence, Q_bias, K_bias, steps(Angles, 1), D, steps(Z, 1), own, chunk_size)
        outs.append(out)
        finals.append(final)
    return jnp.concatenate(outs, axis=1), tuple(jnp.concatenate(parts, axis=0) for parts in zip(*finals, strict=True))


def mamba3_siso_step(
    Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, states=None
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """One decoding step, the recurrence itself: out (batch, H, P) in V's dtype and the new states, layouts as
    ``api.mamba3_siso_step``."""
    compute = arithmetic_dtype(V.dtype)
    batch, heads, headdim = V.shape
    if states is None:
        pairs, dstate = Angles.shape[-1], Q.shape[-1]
        states = (
            jnp.zeros((batch, heads, pairs), compute),
            jnp.zeros((batch, heads, headdim, dstate), compute),
            jnp.zeros((batch, heads, dstate), compute),
            jnp.zeros((batch, heads, headdim), V.dtype),
        )
    angle0, ssm0, k0, v0 = states
    theta = jnp.mod(angle0.astype(compute) + angle_increments(Angles, DT, compute), TWO_PI)
    q = rotate_pairs(_per_head(Q, heads, compute) + Q_bias.astype(compute), theta)
    k = rotate_pairs(_per_head(K, heads, compute) + K_bias.astype(compute), theta)
    v = V.astype(compute)
    sigma, dt = jax.nn.sigmoid(Trap.astype(compute)), DT.astype(compute)
    alpha = jnp.exp(ADT.astype(compute))
    outer = lambda a, b: jnp.einsum("bhp,bhn->bhpn", a, b)  # noqa: E731
    previous = (alpha * dt * (1 - sigma))[..., None, None] * outer(v0.astype(compute), k0.astype(compute))
    state = alpha[..., None, None] * ssm0.astype(compute) + previous + (dt * sigma)[..., None, None] * outer(v, k)
    out = jnp.einsum("bhpn,bhn->bhp", state, q)
    if D is not None:
        out = out + D.astype(compute)[None, :, None] * v
    if Z is not None:
        out = out * jax.nn.silu(Z.astype(compute))
    return out.astype(V.dtype), (theta, state, k, V)
