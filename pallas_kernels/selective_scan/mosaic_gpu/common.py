"""What the selective scan's Mosaic GPU kernels share: the problem description (``MosaicScanDims``), the split of L
into segments walked in parallel and of a segment into blocks, and the per-step helpers.

Every kernel here runs one warpgroup per (batch row, 128 channels of one group, segment of L): one channel a thread,
its per-step values a (128,) row in ``row_layout``. A program walks its segment's ``blocks_per_segment`` blocks of
``block_l`` steps; the last segment's blocks past L re-read the last block (``clamped_block``) with every step
masked (``step_mask``), so that every grid is static.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import sigmoid

LANES = 128  # threads of a warpgroup: a program's channels, one a thread
STAGES = 2  # blocks' copies in flight
# A TMA copy's shared-memory destination must start on a 128-byte boundary: every slot of a pipelined tile (one
# block of it) must fill a multiple of that, or the second slot's copy faults (CUDA_ERROR_MISALIGNED_ADDRESS).
TMA_SLOT_BYTES = 128
KEEP_LANES = 32  # the keep mask's columns (each step's value repeated): a step's row fills 128 bytes in float32


@dataclasses.dataclass(frozen=True)
class MosaicScanDims:
    batch: int
    seqlen: int
    dim: int
    groups: int
    dstate: int
    has_D: bool
    has_z: bool
    has_bias: bool
    softplus: bool
    block_l: int
    keep_every: int  # forward: steps between the states stored for the backward, a multiple of block_l
    segment_len: int  # steps a program walks: a multiple of block_l, L or more for one segment
    interpret: bool
    has_keep: bool = False  # packed sequences: a (batch, L) keep mask multiplies every step's decay

    @property
    def nblocks(self) -> int:
        return pl.cdiv(self.seqlen, self.block_l)

    @property
    def nkept(self) -> int:
        return pl.cdiv(self.seqlen, self.keep_every)

    @property
    def nsegments(self) -> int:
        return pl.cdiv(self.seqlen, self.segment_len)

    @property
    def blocks_per_segment(self) -> int:
        return self.segment_len // self.block_l

    @property
    def blocks_per_group(self) -> int:
        return self.dim // self.groups // LANES

    @property
    def row_layout(self):
        return plgpu.Layout.WG_STRIDED((LANES,), vec_size=1)


def segment_length(seqlen: int, segments: int, block_l: int) -> int:
    """Steps per segment for ``segments`` segments of L: a multiple of ``block_l``."""
    length = pl.cdiv(seqlen, segments)
    return pl.cdiv(length, block_l) * block_l


def clamped_block(block, dims: MosaicScanDims):
    """The block a pipeline step copies: ``block`` itself, or past L the last block (its steps are masked)."""
    return jnp.minimum(block, dims.nblocks - 1)


def step_mask(block, r: int, dims: MosaicScanDims) -> jax.Array:
    """1.0 where step r of block ``block`` (unclamped) is before L, else 0.0: a masked step has dt 0 (no decay, no
    input) and no gradient."""
    return ((block * dims.block_l + r) < dims.seqlen).astype(jnp.float32)


def step_dt(delta_tile, r, bias, block, dims: MosaicScanDims) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Step r of block ``block`` (unclamped): delta + delta_bias (``bias`` a row, or None), dt (its softplus where
    ``dims.softplus``; 0 on a masked step past L) and the step's mask (``step_mask``)."""
    raw = plgpu.load(delta_tile.at[r], layout=dims.row_layout).astype(jnp.float32)
    raw = raw if bias is None else raw + bias
    mask = step_mask(block, r, dims)
    return raw, (softplus(raw) if dims.softplus else raw) * mask, mask


def step_keep(keep_tile, r, mask) -> jax.Array:
    """Step r's factor on the state carried into it: the keep mask's value (0 where a packed sequence starts), 1 on
    a masked step past L (whatever the copy brought there), so that a walk passes through those unchanged."""
    return 1.0 + (keep_tile[r, 0] - 1.0) * mask


def check_tma_slots(refs: list, block_shapes: list[tuple[int, ...]]) -> None:
    """Raises where a slot (one block of a pipelined tile, or one row of a buffer whose rows TMA copies from their
    starts) does not fill a multiple of TMA_SLOT_BYTES: the copy of the second would start off a 128-byte boundary.
    Checked while tracing, so interpret mode sees it."""
    for ref, shape in zip(refs, block_shapes, strict=True):
        size = math.prod(shape) * jnp.dtype(ref.dtype).itemsize
        if size % TMA_SLOT_BYTES:
            raise ValueError(
                f"a Mosaic GPU TMA slot of {shape} {jnp.dtype(ref.dtype).name} fills {size} bytes, not a multiple "
                f"of {TMA_SLOT_BYTES}: its TMA copy would start off a {TMA_SLOT_BYTES}-byte boundary"
            )


def softplus(x: jax.Array) -> jax.Array:
    """log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)) = max(x, 0) - log(sigmoid(|x|)): finite for any x."""
    return jnp.maximum(x, 0.0) - jnp.log(sigmoid(jnp.abs(x)))


def walk_segment(body, dims: MosaicScanDims, block_of, channel_refs: list, state_refs: list, blk, init_carry):
    """``body`` over the program's segment, pipeline step j on block ``block_of(j)`` (clamped: ``clamped_block``):
    the (block_l, 128) tiles of ``channel_refs`` ((L, dim) views; the program's channels block ``blk``), the
    (block_l, width) tiles of ``state_refs`` ((L, width) views, width N or B's and C's rows padded past it) and,
    last of those, the (block_l, KEEP_LANES) tile of the keep mask where ``dims.has_keep`` come into shared memory
    by TMA, STAGES blocks in flight, and reach ``body(indices, *channel_tiles, *state_tiles, carry)`` in that
    order. Returns the last carry."""

    def tile(shape: tuple[int, int], column_block) -> plgpu.BlockSpec:
        return plgpu.BlockSpec(shape, lambda j: (clamped_block(block_of(j), dims), column_block))

    channel_shape = (dims.block_l, LANES)
    state_shapes = [(dims.block_l, ref.shape[-1]) for ref in state_refs]
    check_tma_slots([*channel_refs, *state_refs], [channel_shape] * len(channel_refs) + state_shapes)
    specs = [tile(channel_shape, blk)] * len(channel_refs) + [tile(shape, 0) for shape in state_shapes]
    return plgpu.emit_pipeline(
        body,
        grid=(dims.blocks_per_segment,),
        in_specs=specs,
        max_concurrent_steps=STAGES,
        init_carry=init_carry,
    )(*channel_refs, *state_refs)
