"""What the Triton selective-scan kernels share: a program's tile and one step's math.

Tiles are (Np, block_d): states along the first axis (N padded to a power of two, Np), channels along the second,
so per-channel sums over states stay inside a thread (or a few lanes) and loads along channels are contiguous.
Layouts in HBM: u, delta, z, out (batch, L, dim); B, C (batch, L, G, N); A2 = A * log2(e) transposed to (N, dim);
chunk states (batch, nchunks, N, dim), float32. Every (N, dim) array has its rows padded to dim + 1 (see
``layout.padded_rows``).
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._triton import exp2, sigmoid, softplus
from pallas_kernels.selective_scan.dims import ScanDims


class Tile:
    """One program's view: batch row ``b``, group ``g``, channels ``d0 + [0, block_d)`` (masked past the group)."""

    def __init__(self, dims: ScanDims, block=None, batch_group=None):
        """``block``: the channel block (default: the third grid axis), e.g. a loop index in a program that walks
        every block of its group; then ``batch_group`` passes the program's (batch row, group), read outside the
        loop (interpret mode reads program ids only at the kernel's top level)."""
        self.dims = dims
        self.b, self.g = batch_group or (pl.program_id(0), pl.program_id(1))
        lane0 = (pl.program_id(2) if block is None else block) * dims.block_d
        self.d0 = self.g * dims.dim_per_group + lane0
        self.cmask = lane0 + jnp.arange(dims.block_d) < dims.dim_per_group
        self.rmask = jnp.arange(dims.np_) < dims.dstate
        self.tile_mask = self.rmask[:, None] & self.cmask[None, :]

    def traced(self, index):
        """An index as a traced value: a masked read past the end, e.g. of the last chunk, is fine at run time but
        refused by Pallas's bound check on static indices, and interpret mode does not take Python ints."""
        return index + 0 * self.b

    def channels(self):
        return pl.ds(self.d0, self.dims.block_d)

    def store_channels(self, ref, t, valid, x) -> None:
        plgpu.store(ref.at[self.b, t, self.channels()], x.astype(ref.dtype), mask=self.cmask & valid)

    def load_tile(self, ref, *lead) -> jax.Array:
        """(Np, block_d) float32 of a (..., N, dim) ref."""
        idx = (*lead, pl.ds(0, self.dims.np_), self.channels())
        return plgpu.load(ref.at[idx], mask=self.tile_mask, other=0).astype(jnp.float32)

    def store_tile(self, ref, x, *lead, mask=True) -> None:
        """Store an (Np, block_d) tile into a (..., N, dim) ref; ``mask`` (a scalar condition) may skip it."""
        idx = (*lead, pl.ds(0, self.dims.np_), self.channels())
        plgpu.store(ref.at[idx], x.astype(ref.dtype), mask=self.tile_mask & mask)

    def load_vector(self, ref) -> jax.Array:
        """(block_d,) float32 of a (dim,) ref."""
        return plgpu.load(ref.at[self.channels()], mask=self.cmask, other=0).astype(jnp.float32)


@dataclasses.dataclass
class Step:
    """Inputs of one time step, prepared: dt after bias, softplus and masking (zero outside [0, L) and the group)."""

    valid: jax.Array  # scalar: 0 <= t < L
    u: jax.Array | None  # (block_d,)
    dt: jax.Array  # (block_d,)
    dt_grad_scale: jax.Array | None  # (block_d,) d dt / d delta: sigmoid(delta + bias) under softplus
    B: jax.Array | None  # (Np,)
    C: jax.Array | None  # (Np,)
    z: jax.Array | None  # (block_d,)
    dout: jax.Array | None  # (block_d,)


def prepare(tile: Tile, raw, bias, *, grad: bool = False) -> Step:
    """A step's loads (``prefetch.RawStep``) made ready for the arithmetic, float32."""
    dims = tile.dims
    f32 = jnp.float32
    valid = (raw.t >= 0) & (raw.t < dims.seqlen)
    dt_raw = raw.delta.astype(f32)
    if bias is not None:
        dt_raw = dt_raw + bias
    dt = softplus(dt_raw, dims.interpret) if dims.softplus else dt_raw
    dt = jnp.where(tile.cmask & valid, dt, 0.0)
    scale = sigmoid(dt_raw, dims.interpret) if grad and dims.softplus else None
    cast = lambda x: None if x is None else x.astype(f32)  # noqa: E731
    return Step(valid, cast(raw.u), dt, scale, cast(raw.B), cast(raw.C), cast(raw.z), cast(raw.dout))


def decay(step: Step, A2: jax.Array, interpret: bool) -> jax.Array:
    """exp(dt A) per (state, channel), with A2 = A log2(e)."""
    return exp2(step.dt[None, :] * A2, interpret)


def advance(h: jax.Array, step: Step, a: jax.Array) -> jax.Array:
    """h_t = exp(dt A) h_{t-1} + dt u B."""
    return a * h + step.B[:, None] * (step.dt * step.u)[None, :]


def silu(z: jax.Array, interpret: bool) -> jax.Array:
    return z * sigmoid(z, interpret)


def readout(h: jax.Array, step: Step, Dv) -> jax.Array:
    """y_t = C_t . h_t + D u_t (before the z gate), (block_d,)."""
    y = jnp.sum(h * step.C[:, None], axis=0)
    return y + Dv * step.u if Dv is not None else y


def optional_refs(refs, flags):
    """Split the tail of a kernel's ref list into the optional inputs (None where the flag is off)."""
    it = iter(refs)
    return [next(it) if flag else None for flag in flags], list(it)
