"""What the two Mosaic GPU walks share (``mosaic_gpu.forward``'s fused walk, ``mosaic_gpu.states``'s state
passes): a program's place on their grid (H x 64-dim parts, segments, batch), the float32 state it starts from, and
the pipelined loop over its segment's blocks that leaves the end state."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.mosaic_gpu.common import TILE

STEPS_IN_FLIGHT = 2  # pipeline stages: the next block's copies in flight while this one computes


class WalkProgram(NamedTuple):
    """One walk program: batch row b, segment s, head h of group g, its part-th 64 head dims p (a slice), its
    segment's first block and number of blocks (traced where the last segment is shorter), and, in a program of
    several warpgroups, this one's index w."""

    b: jax.Array
    s: jax.Array
    h: jax.Array
    g: jax.Array
    part: jax.Array
    p: pl.Slice
    first: jax.Array
    steps: jax.Array | int
    w: jax.Array | int = 0


WARPGROUP_AXIS = "wg"  # the thread axis of a walk on several warpgroups


def walk_grid(head_parts: int, segments: int, batch: int, warpgroups: int = 1) -> dict:
    """The walks' grid (heads x 64-dim parts, segments, batch) and its axis names, which ``walk_program`` reads:
    ``call_kernel``'s ``grid``, ``grid_names`` and, for ``warpgroups`` > 1, ``threads``."""
    grid = {"grid": (head_parts, segments, batch), "grid_names": ("hp", "segment", "batch")}
    return grid | ({"threads": (warpgroups, WARPGROUP_AXIS)} if warpgroups > 1 else {})


def walk_program(dims: SsdDims, parts: int, segment_blocks: int, warpgroups: int = 1) -> WalkProgram:
    """This program's place on ``walk_grid``'s grid (and this warpgroup's, for ``warpgroups`` > 1)."""
    hp, s, b = lax.axis_index("hp"), lax.axis_index("segment"), lax.axis_index("batch")
    w = lax.axis_index(WARPGROUP_AXIS) if warpgroups > 1 else 0
    h, part = hp // parts, hp % parts
    first = s * segment_blocks
    # the last segment may be shorter: a dynamic step count, read by emit_pipeline as such
    steps = segment_blocks if dims.nblocks % segment_blocks == 0 else jnp.minimum(segment_blocks, dims.nblocks - first)
    return WalkProgram(b, s, h, h // dims.heads_per_group, part, pl.ds(part * TILE, TILE), first, steps, w)


def start_state(start_ref, prog: WalkProgram, dstate: int, cols: pl.Slice | None = None) -> jax.Array:
    """The (64, N) float32 state the walk starts from (its ``cols`` columns where given), in ``wgmma``'s accumulator
    layout: the segment's from ``start_ref`` (batch, segments, H, P, N), or zeros where None."""
    wg = plgpu.Layout.WGMMA
    cols = pl.ds(0, dstate) if cols is None else cols
    if start_ref is None:
        return plgpu.layout_cast(jnp.zeros((TILE, cols.size), jnp.float32), wg)
    return plgpu.load(start_ref.at[prog.b, prog.s, prog.h, prog.p, cols], layout=wg, optimized=False)  # global memory


def walk_blocks(step, streams, state: jax.Array, prog: WalkProgram, end_ref=None, stages: int = STEPS_IN_FLIGHT):
    """``step`` over the segment's blocks with ``streams`` ((source ref, BlockSpec) pairs) copied in by TMA
    (``stages`` blocks' at once), the state as the carry; then the end state into ``end_ref`` (batch, segments, H, P,
    N) float32 if given, and every store the steps issued waited for."""
    state = plgpu.emit_pipeline(
        step,
        grid=(prog.steps,),
        in_specs=[spec for _, spec in streams],
        max_concurrent_steps=stages,
        init_carry=state,
    )(*[src for src, _ in streams])
    if end_ref is not None:
        end_ref.at[prog.b, prog.s, prog.h, prog.p][...] = state
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
