"""What the chunked design's forward and backward kernels share: one chunk's inputs as tiles, and the scan.

A chunk is ``rows`` consecutive time steps. Per-channel inputs load as (rows, block_d) tiles, B and C as
(rows, Np), and the recurrence runs on (rows, Np, block_d) tiles: rows along time, then states, then channels.
Steps outside [0, L) and channels outside the group load as zeros and get dt = 0, so they neither decay nor
drive the state.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._linear_scan import linear_scan
from pallas_kernels._triton import exp2, sigmoid, softplus
from pallas_kernels.selective_scan.triton.tiles import Tile


@dataclasses.dataclass
class ChunkInputs:
    """One chunk's inputs, float32: per-channel tiles (rows, block_d), per-state tiles (rows, Np); absent ones None."""

    mask: jax.Array  # (rows, block_d): the step is in [0, L) and the channel in the group
    u: jax.Array | None
    dt: jax.Array  # after bias and softplus, 0 where masked
    dt_grad_scale: jax.Array | None  # d dt / d delta (sigmoid(delta + bias) under softplus)
    B: jax.Array | None
    C: jax.Array | None
    z: jax.Array | None = None
    dout: jax.Array | None = None


class ChunkLoader:
    """Loads the chunk of ``rows`` steps starting at any t0 (also past L or before 0: those steps read as zeros)."""

    def __init__(self, tile: Tile, bias):
        self.tile, self.bias = tile, bias
        self.rows = jnp.arange(tile.dims.chunk)

    def time_mask(self, t0) -> jax.Array:
        t = t0 + self.rows
        return (t >= 0) & (t < self.tile.dims.seqlen)

    def channel_mask(self, t0) -> jax.Array:
        """(rows, block_d): the step is in [0, L) and the channel in the group."""
        return self.time_mask(t0)[:, None] & self.tile.cmask[None, :]

    def channel_tile(self, ref, t0) -> jax.Array:
        tile, dims = self.tile, self.tile.dims
        idx = (tile.b, pl.ds(t0, dims.chunk), tile.channels())
        return plgpu.load(ref.at[idx], mask=self.channel_mask(t0), other=0).astype(jnp.float32)

    def _state_index(self, ref, t0):
        """(rows, Np) of a (batch, L, G, N) ref and its mask (the step in [0, L), the state below N)."""
        tile, dims = self.tile, self.tile.dims
        mask = self.time_mask(t0)[:, None] & tile.rmask[None, :]
        return ref.at[tile.b, pl.ds(t0, dims.chunk), tile.g, pl.ds(0, dims.np_)], mask

    def state_tile(self, ref, t0) -> jax.Array:
        at, mask = self._state_index(ref, t0)
        return plgpu.load(at, mask=mask, other=0).astype(jnp.float32)

    def store_states(self, ref, t0, x) -> None:
        at, mask = self._state_index(ref, t0)
        plgpu.store(at, x.astype(ref.dtype), mask=mask)

    def dt(self, delta_ref, t0, *, grad: bool = False) -> tuple[jax.Array, jax.Array | None]:
        """dt (rows, block_d) at the chunk from t0, and with ``grad`` d dt / d delta."""
        dims = self.tile.dims
        raw = self.channel_tile(delta_ref, t0)
        if self.bias is not None:
            raw = raw + self.bias[None, :]
        dt = softplus(raw, dims.interpret) if dims.softplus else raw
        dt = jnp.where(self.channel_mask(t0), dt, 0.0)
        scale = sigmoid(raw, dims.interpret) if grad and dims.softplus else None
        return dt, scale

    def store_channels(self, ref, t0, x) -> None:
        tile, dims = self.tile, self.tile.dims
        idx = (tile.b, pl.ds(t0, dims.chunk), tile.channels())
        plgpu.store(ref.at[idx], x.astype(ref.dtype), mask=self.channel_mask(t0))

    def load(self, t0, u_ref, delta_ref, B_ref=None, C_ref=None, z_ref=None, dout_ref=None, *, grad: bool = False):
        """The chunk from t0; inputs whose ref is None stay None."""
        dt, scale = self.dt(delta_ref, t0, grad=grad)
        per_channel = lambda ref: None if ref is None else self.channel_tile(ref, t0)  # noqa: E731
        per_state = lambda ref: None if ref is None else self.state_tile(ref, t0)  # noqa: E731
        return ChunkInputs(
            self.channel_mask(t0),
            per_channel(u_ref),
            dt,
            scale,
            per_state(B_ref),
            per_state(C_ref),
            per_channel(z_ref),
            per_channel(dout_ref),
        )


def decays(dt: jax.Array, A2: jax.Array, interpret: bool) -> jax.Array:
    """exp(dt A) as (rows, Np, block_d) from dt (rows, block_d) and A2 = A log2(e) (Np, block_d)."""
    return exp2(dt[:, None, :] * A2[None, :, :], interpret)


def states(x: ChunkInputs, a: jax.Array, h0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Every state of the chunk, h_t = a_t h_{t-1} + B_t dt_t u_t from h0 (Np, block_d) before its first step:
    (h (rows, Np, block_d), the inputs' drive B dt u (rows, Np, block_d))."""
    drive = x.B[:, :, None] * (x.dt * x.u)[:, None, :]
    a_cum, h_local = linear_scan(a, drive, axis=0)
    return h_local + a_cum * h0[None], drive


def row(x: jax.Array, index: int) -> jax.Array:
    """Row ``index`` of a (rows, ...) tile (a masked sum along the scan axis: Triton has no register indexing)."""
    rows = jnp.arange(x.shape[0]).reshape((-1,) + (1,) * (x.ndim - 1))
    return jnp.sum(jnp.where(rows == index, x, 0.0), axis=0)


def readout(h: jax.Array, x: ChunkInputs, Dv) -> jax.Array:
    """y_t = C_t . h_t + D u_t before the z gate, (rows, block_d)."""
    y = jnp.sum(h * x.C[:, :, None], axis=1)
    return y + Dv[None, :] * x.u if Dv is not None else y
