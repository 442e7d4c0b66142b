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

MIMO (rank R): Q, K come per rank r (biases per head and rank), the feature pairs turned are (j, j + N / 2) instead
of (2j, 2j + 1), and the input enters through R up-projections u_{t,r} = MIMO_V_r x_t: S_t = alpha_t S_{t-1} +
alpha_t Delta_t (1 - sigma_t) sum_r u_{t-1,r} k_{t-1,r}^T + Delta_t sigma_t sum_r u_{t,r} k_{t,r}^T, one state a head;
y_{t,r} = (S_t q_{t,r} + D u_{t,r}) silu(Z_t MIMO_Z_r), out_t = sum_r MIMO_Out_r y_{t,r}. SISO is the rank-1 case
with MIMO_V = MIMO_Z = MIMO_Out = 1 and adjacent pairs.
"""

import functools
import itertools

import jax
import jax.numpy as jnp
from jax import lax

TWO_PI = 2 * jnp.pi
# float32 products exactly as written on every device: a GPU's default would take float32 matmuls in TF32 (measured
# 1.8e-4 relative L2 from the float64 answer on an H100, over float32's tolerance)
HIGHEST = lax.Precision.HIGHEST


def arithmetic_dtype(dtype) -> jnp.dtype:
    """float64 for float64 inputs, float32 for every other dtype."""
    return jnp.dtype(jnp.float64) if jnp.dtype(dtype) == jnp.float64 else jnp.dtype(jnp.float32)


def rotate_pairs(x: jax.Array, theta: jax.Array) -> jax.Array:
    """x (..., N) with its feature pairs (2j, 2j + 1), j < S, turned by theta (..., S); the rest unchanged (SISO)."""
    pairs = theta.shape[-1]
    head = x[..., : 2 * pairs].reshape(*x.shape[:-1], pairs, 2)
    a, b = head[..., 0], head[..., 1]
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    turned = jnp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(*x.shape[:-1], 2 * pairs)
    return jnp.concatenate([turned, x[..., 2 * pairs :]], axis=-1)


def rotate_halves(x: jax.Array, theta: jax.Array) -> jax.Array:
    """x (..., N) with its feature pairs (j, j + N / 2), j < S, turned by theta (..., S); the rest unchanged
    (MIMO)."""
    pairs, half = theta.shape[-1], x.shape[-1] // 2
    a, b = x[..., :pairs], x[..., half : half + pairs]
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    parts = [a * cos - b * sin, x[..., pairs:half], a * sin + b * cos, x[..., half + pairs :]]
    return jnp.concatenate(parts, axis=-1)


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


def _per_rank(x: jax.Array, compute) -> jax.Array:
    """A per-head-and-rank parameter (H, R, X) as (R, H, X) in ``compute``."""
    return jnp.swapaxes(x.astype(compute), 0, 1)


def _pad_time(x: jax.Array, axis: int, extra: int) -> jax.Array:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths)


def scan_chunks(q, k, u, dt, sigma, adt, state, chunk: int) -> tuple[jax.Array, jax.Array]:
    """The chunked recurrence of every rank at once. q, k (batch, L, R, H, N) rotated, with their biases; u (batch,
    L, R, H, P) the inputs; dt, sigma, adt (batch, H, L); state (batch, H, P, N) before step 0 with the input
    states' next-step term in. Returns S_t q_{t,r} (batch, L, R, H, P), without D, and the last state."""
    batch, seqlen, _, heads, _ = q.shape
    chunks = -(-seqlen // chunk)
    extra = chunks * chunk - seqlen
    gamma = dt * sigma
    before = dt * (1 - sigma)  # the weight of step t - 1's input at step t, before its decay
    scale = gamma + jnp.concatenate([before[..., 1:], jnp.zeros_like(before[..., :1])], axis=-1)

    def chunked(x, time_axis):  # pad L to whole chunks (inputs of weight 0, decay 1) and split it
        x = _pad_time(x, time_axis, extra)
        return x.reshape(*x.shape[:time_axis], chunks, chunk, *x.shape[time_axis + 1 :])

    qc, kc, uc = (chunked(jnp.moveaxis(a, 3, 1), 2) for a in (q, k, u))  # (batch, H, chunks, chunk, R, .)
    gc, sc, ac = (chunked(a, 2) for a in (gamma, scale, adt))  # (batch, H, chunks, chunk)
    cum = jnp.cumsum(ac, axis=-1)
    causal = jnp.tril(jnp.ones((chunk, chunk), bool), -1)
    gap = jnp.where(causal, cum[..., :, None] - cum[..., None, :], 0.0)
    weight = jnp.where(causal, jnp.exp(gap), 0.0) * sc[..., None, :]  # [t, j]: exp(ADT_{j+1..t}) scale_j, j < t
    scores = jnp.einsum("bhctrn,bhcjsn->bhctrjs", qc, kc, precision=HIGHEST) * weight[..., :, None, :, None]
    within = jnp.einsum("bhctrjs,bhcjsp->bhctrp", scores, uc, precision=HIGHEST)
    same = jnp.einsum("bhctrn,bhctsn->bhctrs", qc, kc, precision=HIGHEST) * gc[..., None, None]  # the step's own inputs
    within = within + jnp.einsum("bhctrs,bhctsp->bhctrp", same, uc, precision=HIGHEST)

    to_end = jnp.exp(cum[..., -1:] - cum) * sc  # weight of each input in the state the chunk hands on
    handed = jnp.einsum("bhct,bhctsp,bhctsn->bhcpn", to_end, uc, kc, precision=HIGHEST)

    def walk(s, chunk_inputs):
        chunk_decay, added = chunk_inputs
        return chunk_decay[..., None, None] * s + added, s

    final, starts = lax.scan(walk, state, (jnp.moveaxis(jnp.exp(cum[..., -1]), 2, 0), jnp.moveaxis(handed, 2, 0)))
    starts = jnp.moveaxis(starts, 0, 2)  # (batch, H, chunks, P, N): the state before each chunk
    carried = jnp.exp(cum)[..., None, None] * jnp.einsum("bhcpn,bhctrn->bhctrp", starts, qc, precision=HIGHEST)
    out = (within + carried).reshape(batch, heads, chunks * chunk, *within.shape[-2:])[:, :, :seqlen]
    return jnp.transpose(out, (0, 2, 3, 1, 4)), final


def _start_state(states, u0, dt, sigma, shape, compute):
    """The state before step 0 with the input states' next-step term in: ssm + Delta_0 (1 - sigma_0) sum_r u_r k_r^T
    (zeros without input states); u0 (batch, R, H, P) the input states' v up-projected, states' k (batch, R, H, N)."""
    if states is None:
        return jnp.zeros(shape, compute)
    _, ssm0, k0, _ = states
    before = (dt * (1 - sigma))[..., 0]  # (batch, H)
    return ssm0.astype(compute) + before[..., None, None] * jnp.einsum(
        "brhp,brhn->bhpn", u0, k0.astype(compute), precision=HIGHEST
    )


def _gate(y, Z, zproj, compute):
    """y (batch, L, R, H, P) times silu(Z zproj_r) (unchanged without Z)."""
    if Z is None:
        return y
    return y * jax.nn.silu(Z.astype(compute)[:, :, None] * zproj)


def mamba3_siso(
    Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, states=None, chunk_size: int = 64, scan=None
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """out (batch, L, H, P) in V's dtype, and the final states (angle (batch, H, S), ssm (batch, H, P, N), k (batch,
    H, N), all in the arithmetic dtype, v (batch, H, P) in V's dtype). Layouts as ``api.mamba3_siso_combined``;
    ``states`` the input (angle, ssm, k, v) or None. ``scan``: what runs the recurrence (``scan_chunks``' signature;
    None: ``scan_chunks``, the kernels' path passes its own)."""
    compute = arithmetic_dtype(V.dtype)
    heads = V.shape[2]
    angle0 = None if states is None else states[0]
    theta = cumulative_angles(Angles, DT, angle0, chunk_size, compute)
    q = rotate_pairs(_per_head(Q, heads, compute) + Q_bias.astype(compute), theta)[:, :, None]  # (batch, L, 1, H, N)
    k = rotate_pairs(_per_head(K, heads, compute) + K_bias.astype(compute), theta)[:, :, None]
    u = V.astype(compute)[:, :, None]
    sigma, dt, adt = jax.nn.sigmoid(Trap.astype(compute)), DT.astype(compute), ADT.astype(compute)  # (batch, H, L)
    rank_one = None if states is None else (*states[:2], states[2][:, None], states[3])
    u0 = None if states is None else states[3].astype(compute)[:, None]
    state = _start_state(rank_one, u0, dt, sigma, (V.shape[0], heads, V.shape[-1], Q.shape[-1]), compute)
    y, final = (scan or scan_chunks)(q, k, u, dt, sigma, adt, state, chunk_size)
    if D is not None:
        y = y + D.astype(compute)[:, None] * u
    out = _gate(y, Z, 1.0, compute)[:, :, 0]
    return out.astype(V.dtype), (theta[:, -1], final, k[:, -1, 0], V[:, -1])


def mamba3_mimo(
    Q,
    K,
    V,
    ADT,
    DT,
    Trap,
    Q_bias,
    K_bias,
    MIMO_V,
    MIMO_Z,
    MIMO_Out,
    Angles,
    D=None,
    Z=None,
    states=None,
    chunk_size: int = 16,
    scan=None,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """out (batch, L, H, P) in V's dtype, or per rank (batch, L, R, H, P) without MIMO_Out, and the final states
    (angle (batch, H, S), ssm (batch, H, P, N), k (batch, R, H, N), in the arithmetic dtype, v (batch, H, P) in V's
    dtype). Layouts as ``api.mamba3_mimo``; ``states`` the input (angle, ssm, k, v) or None; ``scan`` as
    ``mamba3_siso``'s."""
    compute = arithmetic_dtype(V.dtype)
    heads = V.shape[2]
    angle0 = None if states is None else states[0]
    theta = cumulative_angles(Angles, DT, angle0, chunk_size, compute)[:, :, None]  # (batch, L, 1, H, S)
    per_rank = functools.partial(_per_rank, compute=compute)
    q = rotate_halves(_per_head(Q, heads, compute) + per_rank(Q_bias), theta)  # (batch, L, R, H, N)
    k = rotate_halves(_per_head(K, heads, compute) + per_rank(K_bias), theta)
    u = V.astype(compute)[:, :, None] * per_rank(MIMO_V)  # (batch, L, R, H, P)
    sigma, dt, adt = jax.nn.sigmoid(Trap.astype(compute)), DT.astype(compute), ADT.astype(compute)
    u0 = None if states is None else states[3].astype(compute)[:, None] * per_rank(MIMO_V)
    state = _start_state(states, u0, dt, sigma, (V.shape[0], heads, V.shape[-1], Q.shape[-1]), compute)
    y, final = (scan or scan_chunks)(q, k, u, dt, sigma, adt, state, chunk_size)
    if D is not None:
        y = y + D.astype(compute)[:, None] * u
    y = _gate(y, Z, per_rank(MIMO_Z), compute)
    out = y if MIMO_Out is None else jnp.sum(y * per_rank(MIMO_Out), axis=2)
    return out.astype(V.dtype), (theta[:, -1, 0], final, k[:, -1], V[:, -1])


TIME_FIRST = ("Q", "K", "V", "Z", "Angles")  # per-step arguments with time on axis 1
TIME_LAST = ("ADT", "DT", "Trap")  # ... on axis 2


def mamba3_packed(
    run, args: dict, states, chunk_size: int, bounds: tuple[int, ...]
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """``run`` (``mamba3_siso`` or ``mamba3_mimo``) over sequences packed along L (batch 1; sequence i holds steps
    bounds[i] to bounds[i + 1] - 1), each from its own input states (``states``' leading axis the sequence, None:
    zeros) in chunks aligned to its first step, as mamba-ssm's ``cu_seqlens``; ``args`` its keyword arguments. Returns
    out (1, L, ...) and the final states, the sequence as their leading axis."""
    outs, finals = [], []
    for i, (start, end) in enumerate(itertools.pairwise(bounds)):
        sequence = {
            name: value
            if value is None or name not in TIME_FIRST + TIME_LAST
            else lax.slice_in_dim(value, start, end, axis=1 if name in TIME_FIRST else 2)
            for name, value in args.items()
        }
        own = None if states is None else tuple(s[i : i + 1] for s in states)
        out, final = run(**sequence, states=own, chunk_size=chunk_size)
        outs.append(out)
        finals.append(final)
    return jnp.concatenate(outs, axis=1), tuple(jnp.concatenate(parts, axis=0) for parts in zip(*finals, strict=True))


def step_state(ssm0, q, k, u, u0, k0, ADT, DT, Trap, compute) -> tuple[jax.Array, jax.Array]:
    """One step of the recurrence for every rank: q, k (batch, R, H, N) rotated; u, u0 (batch, R, H, P) this step's
    and the last step's inputs, k0 the last step's k. Returns the new state (batch, H, P, N) and S q_r (batch, R, H,
    P)."""
    sigma, dt = jax.nn.sigmoid(Trap.astype(compute)), DT.astype(compute)
    alpha = jnp.exp(ADT.astype(compute))
    previous = jnp.einsum("brhp,brhn->bhpn", u0, k0.astype(compute), precision=HIGHEST)
    current = jnp.einsum("brhp,brhn->bhpn", u, k, precision=HIGHEST)
    state = alpha[..., None, None] * ssm0.astype(compute)
    state = state + (alpha * dt * (1 - sigma))[..., None, None] * previous + (dt * sigma)[..., None, None] * current
    return state, jnp.einsum("bhpn,brhn->brhp", state, q, precision=HIGHEST)


def _zero_states(V, rank: int | None, pairs: int, dstate: int, compute) -> tuple:
    """(angle, ssm, k, v) zeros: k (batch, H, N) for SISO (``rank`` None), (batch, R, H, N) for MIMO."""
    batch, heads, headdim = V.shape
    k_shape = (batch, heads, dstate) if rank is None else (batch, rank, heads, dstate)
    return (
        jnp.zeros((batch, heads, pairs), compute),
        jnp.zeros((batch, heads, headdim, dstate), compute),
        jnp.zeros(k_shape, compute),
        jnp.zeros((batch, heads, headdim), V.dtype),
    )


def mamba3_siso_step(
    Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, states=None, step=None
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """One decoding step, the recurrence itself: out (batch, H, P) in V's dtype and the new states, layouts as
    ``api.mamba3_siso_step``. ``step``: what updates the state (``step_state``'s signature; None: ``step_state``,
    the kernel's path passes its own)."""
    compute = arithmetic_dtype(V.dtype)
    heads = V.shape[1]
    angle0, ssm0, k0, v0 = states or _zero_states(V, None, Angles.shape[-1], Q.shape[-1], compute)
    theta = jnp.mod(angle0.astype(compute) + angle_increments(Angles, DT, compute), TWO_PI)
    q = rotate_pairs(_per_head(Q, heads, compute) + Q_bias.astype(compute), theta)
    k = rotate_pairs(_per_head(K, heads, compute) + K_bias.astype(compute), theta)
    v = V.astype(compute)
    state, out = (step or step_state)(
        ssm0, q[:, None], k[:, None], v[:, None], v0.astype(compute)[:, None], k0[:, None], ADT, DT, Trap, compute
    )
    out = out[:, 0]
    if D is not None:
        out = out + D.astype(compute)[None, :, None] * v
    if Z is not None:
        out = out * jax.nn.silu(Z.astype(compute))
    return out.astype(V.dtype), (theta, state, k, V)


def mamba3_mimo_step(
    Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D=None, Z=None, states=None, step=None
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """One MIMO decoding step: out (batch, H, P) in V's dtype (per rank (batch, R, H, P) without MIMO_Out) and the
    new states, layouts as ``api.mamba3_mimo_step``; ``step`` as for ``mamba3_siso_step``."""
    compute = arithmetic_dtype(V.dtype)
    heads = V.shape[1]
    per_rank = functools.partial(_per_rank, compute=compute)
    angle0, ssm0, k0, v0 = states or _zero_states(V, Q.shape[1], Angles.shape[-1], Q.shape[-1], compute)
    theta = jnp.mod(angle0.astype(compute) + angle_increments(Angles, DT, compute), TWO_PI)
    q = rotate_halves(_per_head(Q, heads, compute) + per_rank(Q_bias), theta[:, None])  # (batch, R, H, N)
    k = rotate_halves(_per_head(K, heads, compute) + per_rank(K_bias), theta[:, None])
    u = V.astype(compute)[:, None] * per_rank(MIMO_V)
    u0 = v0.astype(compute)[:, None] * per_rank(MIMO_V)
    state, y = (step or step_state)(ssm0, q, k, u, u0, k0, ADT, DT, Trap, compute)
    if D is not None:
        y = y + D.astype(compute)[None, None, :, None] * u
    if Z is not None:
        y = y * jax.nn.silu(Z.astype(compute)[:, None] * per_rank(MIMO_Z))
    out = y if MIMO_Out is None else jnp.sum(y * per_rank(MIMO_Out), axis=1)
    return out.astype(V.dtype), (theta, state, k, V)
