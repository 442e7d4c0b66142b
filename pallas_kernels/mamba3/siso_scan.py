"""Mamba-3 SISO over whole sequences on the Pallas kernels: the rotary angles, the trapezoid's weights and the
gate in XLA, the scan itself by ``vjp.decayed_scan`` (the SSD's Mosaic GPU kernels, ``mosaic_gpu.scan``).

With sigma_t = sigmoid(Trap_t), the recurrence (``reference``) gives the input v_j k_jᵀ the weight Delta_j sigma_j at
its own step and, decayed from step j + 1 on, also w_j = Delta_{j+1} (1 - sigma_{j+1}) (0 at the last step). The
state S'_t = S_t + w_t v_t k_tᵀ therefore follows S'_t = exp(ADT_t) S'_{t-1} + scale_t v_t k_tᵀ with scale_t =
Delta_t sigma_t + w_t, the SSD's recurrence with its own decay, and

    out_t = (S'_t q_t - w_t (q_t · k_t) v_t + D v_t) silu(Z_t).

The input states enter as the start state S + Delta_0 (1 - sigma_0) v k (the reference's), the final state is S'_L
= S_L (w is 0 at the last step). L is padded to a multiple of 64 (padded steps have scale 0 and decay 1), P and N to
multiples of 64 with zeros (they add nothing to the state or the output), then cut back. q and k, turned per head,
enter the kernels in V's 16-bit dtype (mamba-ssm's Triton kernels round them to bfloat16 too); the correction reads
the same rounded values.
"""

import jax
import jax.numpy as jnp

from pallas_kernels.mamba3 import reference
from pallas_kernels.mamba3.mosaic_gpu.scan import scan_dims
from pallas_kernels.mamba3.vjp import decayed_scan
from pallas_kernels.ssd.config import SsdConfig
from pallas_kernels.ssd.mosaic_gpu.common import TILE


def padded_size(size: int) -> int:
    """size rounded up to the kernels' tile of 64."""
    return -(-size // TILE) * TILE


def _pad_axes(x: jax.Array, sizes: dict[int, int]) -> jax.Array:
    """x zero-padded at the end of each axis in ``sizes`` to that size."""
    widths = [(0, sizes.get(axis, n) - n) for axis, n in enumerate(x.shape)]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x


def mamba3_siso_kernels(
    Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, states, chunk_size: int, config: SsdConfig, interpret: bool
) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array, jax.Array]]:
    """``reference.mamba3_siso``'s results (out in V's dtype, final angle, ssm, k float32 and v) by the kernels; V
    in a 16-bit dtype. ``chunk_size`` only sets where the angles' running sum is taken modulo 2 pi."""
    f32, dtype = jnp.float32, V.dtype
    _, seqlen, heads, headdim = V.shape
    dstate = Q.shape[-1]
    theta = reference.cumulative_angles(Angles, DT, None if states is None else states[0], chunk_size, f32)
    q = reference.rotate_pairs(jnp.repeat(Q.astype(f32), heads // Q.shape[2], axis=2) + Q_bias.astype(f32), theta)
    k = reference.rotate_pairs(jnp.repeat(K.astype(f32), heads // K.shape[2], axis=2) + K_bias.astype(f32), theta)
    q16, k16 = q.astype(dtype), k.astype(dtype)  # (batch, L, H, N)
    sigma, dt = jax.nn.sigmoid(Trap.astype(f32)), DT.astype(f32)  # (batch, H, L)
    before = dt * (1 - sigma)
    after = jnp.concatenate([before[..., 1:], jnp.zeros_like(before[..., :1])], axis=-1)  # w_t
    scale = dt * sigma + after
    start = None
    if states is not None:
        k0, v0 = states[2].astype(f32), states[3].astype(f32)
        start = states[1].astype(f32) + before[..., 0, None, None] * v0[..., :, None] * k0[..., None, :]

    L, P, N = padded_size(seqlen), padded_size(headdim), padded_size(dstate)
    x = _pad_axes(V, {1: L, 3: P})
    D_hp = None if D is None else _pad_axes(jnp.broadcast_to(D.astype(f32)[:, None], (heads, headdim)), {1: P})
    start = None if start is None else _pad_axes(start, {2: P, 3: N})
    k_in, q_in = _pad_axes(k16, {1: L, 3: N}), _pad_axes(q16, {1: L, 3: N})
    dims = scan_dims(x, k_in, D_hp, start, interpret)
    y, final = decayed_scan(
        x, _pad_axes(scale, {2: L}), _pad_axes(ADT.astype(f32), {2: L}), k_in, q_in, D_hp, start, dims, config
    )
    qk = jnp.sum(q16.astype(f32) * k16.astype(f32), axis=-1)  # (batch, L, H)
    y = y[:, :seqlen, :, :headdim].astype(f32) - (qk * jnp.swapaxes(after, 1, 2))[..., None] * V.astype(f32)
    if Z is not None:
        y = y * jax.nn.silu(Z.astype(f32))
    final = final[:, :, :headdim, :dstate]
    return y.astype(dtype), (theta[:, -1], final, k[:, -1], V[:, -1])
