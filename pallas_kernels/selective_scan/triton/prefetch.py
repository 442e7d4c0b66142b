"""Loading the selective scan's per-step inputs ahead of their use.

The kernels walk time sequentially; a load issued in the step that needs it would stall that step for a memory
latency (and the compiler does not move a load above an earlier store that might alias it). So every step's loads
are issued a few steps earlier along the static order in which a loop iteration consumes steps, and the loads
already in flight at the end of an iteration travel to the next one in the loop carry.
"""

import dataclasses

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels.selective_scan.triton.tiles import Tile


@dataclasses.dataclass(frozen=True)
class StepRefs:
    """The per-step input refs; ``None`` for absent inputs (z, and dout outside the backward)."""

    u: object
    delta: object
    B: object
    C: object
    z: object = None
    dout: object = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class RawStep:
    """One step's inputs as loaded (input dtypes), before any arithmetic; absent parts are None."""

    t: jax.Array
    u: jax.Array | None
    delta: jax.Array | None
    B: jax.Array | None
    C: jax.Array | None
    z: jax.Array | None
    dout: jax.Array | None


def load_step(tile: Tile, t, refs: StepRefs, parts: tuple[str, ...]) -> RawStep:
    """Issue the loads of step t (any t: outside [0, L) reads zeros). ``parts`` names the inputs wanted."""
    dims = tile.dims
    t = tile.traced(t)
    valid = (t >= 0) & (t < dims.seqlen)
    got = {}
    for name in ("u", "delta", "z", "dout"):
        ref = getattr(refs, name)
        if name in parts and ref is not None:
            got[name] = plgpu.load(ref.at[tile.b, t, tile.channels()], mask=tile.cmask & valid, other=0)
    for name in ("B", "C"):
        if name in parts:
            ref = getattr(refs, name)
            got[name] = plgpu.load(ref.at[tile.b, t, tile.g, pl.ds(0, dims.np_)], mask=tile.rmask & valid, other=0)
    return RawStep(t, *(got.get(k) for k in ("u", "delta", "B", "C", "z", "dout")))


ALL_PARTS = ("u", "delta", "B", "C", "z", "dout")


class Prefetcher:
    """Loads issued ``distance`` steps ahead of their use along a static order of steps, so each step's load
    latency hides behind the arithmetic of the steps before it. Between loop iterations the loads already
    issued travel in the loop carry (``start`` gives the first iteration's, ``Stream.ahead`` the next one's)."""

    def __init__(self, tile: Tile, refs: StepRefs, distance: int):
        self.tile, self.refs, self.distance = tile, refs, distance

    def load(self, base, item: tuple[int, tuple[str, ...]]) -> RawStep:
        offset, parts = item
        return load_step(self.tile, base + offset, self.refs, parts)

    def reach(self, order: list) -> int:
        """Loads run ahead by at most one iteration's order."""
        return min(self.distance, len(order))

    def start(self, order: list, base) -> tuple[RawStep, ...]:
        """The first loads of ``order``: (offset from ``base``, parts) items."""
        return tuple(self.load(base, item) for item in order[: self.reach(order)])

    def stream(self, queue, order: list, base, next_order: list, next_base) -> "Stream":
        upcoming = [(base, i) for i in order] + [(next_base, i) for i in next_order]
        return Stream(self, queue, upcoming, len(order), self.reach(order))


class Stream:
    """One loop iteration's walk along its order: ``take`` returns the next step's loads and issues the one
    ``distance`` items ahead (running on into the next iteration's order)."""

    def __init__(self, prefetcher: Prefetcher, queue, upcoming: list, count: int, reach: int):
        self.prefetcher, self.queue, self.upcoming = prefetcher, list(queue), upcoming
        self.count, self.reach, self.taken = count, reach, 0

    def take(self) -> RawStep:
        ahead = self.taken + self.reach
        if ahead < len(self.upcoming):
            self.queue.append(self.prefetcher.load(*self.upcoming[ahead]))
        self.taken += 1
        return self.queue.pop(0)

    def ahead(self) -> tuple[RawStep, ...]:
        """The loads issued for the next iteration, once this iteration's order is used up."""
        assert self.taken == self.count, (self.taken, self.count)
        return tuple(self.queue)
