"""Mamba-3's recurrence on the Pallas kernels: ``reference.scan_chunks``' signature and results, the scan by
``vjp.decayed_scan`` (the SSD's Mosaic GPU kernels, ``mosaic_gpu.scan``) and the rest in XLA. The reference's
SISO and MIMO functions run it in place of their chunked scan (``dispatch``).

Per step t, with sigma_t = sigmoid(Trap_t), the recurrence (``reference``) gives the step's inputs X_t = sum_r u_{t,r}
k_{t,r}ᵀ (R ranks; SISO: one) the weight Delta_t sigma_t at their own step and, decayed from step t + 1 on, also w_t
= Delta_{t+1} (1 - sigma_{t+1}) (0 at the last step). The state S'_t = S_t + w_t X_t therefore follows S'_t =
exp(ADT_t) S'_{t-1} + scale_t X_t with scale_t = Delta_t sigma_t + w_t: the SSD's recurrence with its own decay. The
kernels take the ranks as positions of their own, t R + r, the decay at the first (exp(ADT_t)) and none at the
others, so position (t, r) reads the state with the step's ranks up to r in; the ranks after r and w_t's term come
back as an R x R correction per step:

    S_t q_{t,r} = kernel(t, r) + sum_r' (q_{t,r} · k_{t,r'}) (scale_t [r' > r] - w_t) u_{t,r'}.

The start state is the reference's (the input states' next-step term in), the final state S'_L = S_L. L R is padded to
a multiple of 64 (padded positions have scale 0 and decay 1), P and N to multiples of 64 with zeros (they add
nothing to the state or the output), then cut back. q, k and u enter the kernels in the compute dtype (16-bit;
mamba-ssm's Triton op rounds q and k to bfloat16 too); the correction reads the same rounded values.
"""

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from pallas_kernels.mamba3.mosaic_gpu.scan import scan_dims
from pallas_kernels.mamba3.vjp import OUTPUT_NAME, decayed_scan
from pallas_kernels.ssd.api import pallas_config
from pallas_kernels.ssd.config import SsdConfig
from pallas_kernels.ssd.mosaic_gpu.common import TILE


def padded_size(size: int) -> int:
    """size rounded up to the kernels' tile of 64."""
    return -(-size // TILE) * TILE


def _pad_axes(x: jax.Array, sizes: dict[int, int]) -> jax.Array:
    """x zero-padded at the end of each axis in ``sizes`` to that size."""
    widths = [(0, sizes.get(axis, n) - n) for axis, n in enumerate(x.shape)]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x


def kernel_scan(
    q, k, u, dt, sigma, adt, state, chunk: int, *, dtype, config: SsdConfig | None = None, interpret: bool
) -> tuple[jax.Array, jax.Array]:
    """q, k (batch, L, R, H, N) rotated, with their biases; u (batch, L, R, H, P); dt, sigma, adt (batch, H, L);
    state (batch, H, P, N) float32 before step 0 -> (S_t q_{t,r} (batch, L, R, H, P) float32, the final state
    (batch, H, P, N) float32). ``dtype``: the kernels' 16-bit operand dtype; ``config``: the SSD's tiling (None: its
    default for these sizes); ``chunk`` (the reference's) unused: the kernels walk blocks of 64 positions."""
    del chunk
    f32 = jnp.float32
    batch, seqlen, rank, heads, headdim = u.shape
    dstate = q.shape[-1]
    q16, k16, u16 = q.astype(dtype), k.astype(dtype), u.astype(dtype)
    before = dt * (1 - sigma)
    after = jnp.concatenate([before[..., 1:], jnp.zeros_like(before[..., :1])], axis=-1)  # w_t
    scale = dt * sigma + after
    positions, P, N = padded_size(seqlen * rank), padded_size(headdim), padded_size(dstate)
    flat = lambda a, width: _pad_axes(a.reshape(batch, seqlen * rank, heads, -1), {1: positions, 3: width})  # noqa: E731
    on_positions = lambda a: _pad_axes(a.reshape(batch, heads, seqlen * rank), {2: positions})  # noqa: E731
    log_decay = jnp.zeros((batch, heads, seqlen, rank), f32).at[..., 0].set(adt.astype(f32))
    x, k_in, q_in = flat(u16, P), flat(k16, N), flat(q16, N)
    start = None if state is None else _pad_axes(state.astype(f32), {2: P, 3: N})
    config = config or pallas_config(batch, positions, heads, P, N, dtype, ngroups=heads)
    dims = scan_dims(x, k_in, None, start, interpret)
    y, final = decayed_scan(
        x,
        on_positions(jnp.repeat(scale, rank, axis=-1)),
        on_positions(log_decay),
        k_in,
        q_in,
        None,
        start,
        dims,
        config,
    )
    y = (
        checkpoint_name(y, OUTPUT_NAME)[:, : seqlen * rank, :, :headdim]
        .reshape(batch, seqlen, rank, heads, headdim)
        .astype(f32)
    )
    qk = jnp.einsum("btrhn,btshn->bthrs", q16.astype(f32), k16.astype(f32))
    later = jnp.triu(jnp.ones((rank, rank), f32), 1)  # [r, r']: r' after r
    by_step = lambda a: jnp.swapaxes(a, 1, 2)[..., None, None]  # noqa: E731  (batch, H, L) -> (batch, L, H, 1, 1)
    weights = qk * (by_step(scale) * later - by_step(after))
    y = y + jnp.einsum("bthrs,btshp->btrhp", weights, u16.astype(f32))
    return y, final[:, :, :headdim, :dstate]
