"""What the forward and backward selective-scan kernels share: static sizes, a program's tile, one step's math.

Tiles are (Np, block_d): states along the first axis (N padded to a power of two, Np), channels along the second,
so per-channel sums over states stay inside a thread (or a few lanes) and loads along channels are contiguous.
Layouts in HBM: u, delta, z, out (batch, L, dim); B, C (batch, L, G, N); A2 = A * log2(e) transposed to (N, dim);
chunk states (batch, nchunks, N, dim), float32. Every (N, dim) array has its rows padded to dim + 1 (see
``padded_rows``).
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._triton import LOG2_E, exp2, next_pow2, sigmoid, softplus
from pallas_kernels.selective_scan.config import ScanConfig, segment_length


@dataclasses.dataclass(frozen=True)
class ScanDims:
    """Static problem description: sizes, which optional inputs exist, the tiling."""

    batch: int
    seqlen: int
    dim: int
    groups: int
    dstate: int
    has_D: bool
    has_z: bool
    has_bias: bool
    softplus: bool
    block_d: int
    chunk: int
    prefetch: int
    bwd_unroll: int
    interpret: bool
    save_every: int  # steps between the states the forward saves (the backward: it reads)
    segment_len: int  # chunked forward: steps per segment scanned in parallel with the others

    @property
    def nsegments(self) -> int:
        return -(-self.seqlen // self.segment_len)

    @property
    def nsaved(self) -> int:
        return -(-self.seqlen // self.save_every)

    @property
    def dim_per_group(self) -> int:
        return self.dim // self.groups

    @property
    def np_(self) -> int:
        return next_pow2(self.dstate)

    @property
    def nblocks(self) -> int:
        return -(-self.dim_per_group // self.block_d)

    @property
    def nchunks(self) -> int:
        return -(-self.seqlen // self.chunk)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.batch, self.groups, self.nblocks)


def scan_dims(u, B, A, D, z, delta_bias, softplus_: bool, config: ScanConfig, interpret: bool, *, bwd: bool):
    batch, seqlen, dim = u.shape
    groups, dstate = B.shape[2], B.shape[3]
    block = config.bwd_block_d if bwd else config.block_d
    block_size = min(block, next_pow2(dim // groups))
    return ScanDims(
        batch=batch,
        seqlen=seqlen,
        dim=dim,
        groups=groups,
        dstate=dstate,
        has_D=D is not None,
        has_z=z is not None,
        has_bias=delta_bias is not None,
        softplus=bool(softplus_),
        block_d=block_size,
        chunk=_chunk(config, bwd),
        save_every=config.save_every if bwd else config.kept_every,
        segment_len=segment_length(config, seqlen, batch * groups * -(-(dim // groups) // block_size)),
        prefetch=config.bwd_prefetch if bwd else config.prefetch,
        bwd_unroll=config.bwd_unroll,
        interpret=interpret,
    )


def _chunk(config: ScanConfig, bwd: bool) -> int:
    """Steps per loop iteration: the sequential design's ``chunk``; the chunked design's ``rows`` / ``bwd_rows``."""
    if (config.bwd_design if bwd else config.design) != "chunked":
        return config.chunk
    return config.bwd_rows if bwd else config.rows


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
