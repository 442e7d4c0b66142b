"""The loop of the forward's Mosaic GPU walk (``mosaic_gpu.forward``) with the state's N columns in halves on two
warpgroups of one program (``SsdConfig.fwd_walk_warpgroups`` 2), each with its own half of every block's B and C
two blocks deep.

Why: at N 256 the one-warpgroup walk holds the (64, 256) float32 state, 128 registers a thread, beside its
accumulators, and ptxas spills about 790 bytes a thread. Those spills hit L1 only while the program's shared memory
leaves L1 room. Two pipeline stages of B and C, and two heads a program, leave none and run slower (7% of the spill
loads hit L1 against 96%, ncu; ``docs/kernels.md#ssd-walk-at-n-256``). Here each warpgroup
holds a (64, N / 2) half of the state (64 registers at N 256), so B and C can be two blocks ahead without spills.

The block's math is ``mosaic_gpu.forward``'s, each warpgroup on its half of N: its C_h B_hᵀ, C_h S_hᵀ and state
update, and its part of y, exp(cs) C_h S_hᵀ + W_h x with W_h from C_h B_hᵀ (y is linear in N's halves). The second
warpgroup hands its part to the first through shared memory in the inputs' dtype, as out itself is stored; the
first adds the two, D x and the gate, and stores out.

Shared memory (``heuristics.walk_shared_bytes``): x and the decay vectors two blocks deep (z one, read by the first
warpgroup, refilled once read), B's and C's halves two blocks deep for each warpgroup, each warpgroup's S copy and
staged update, the handed part of y and the pre-gate output: 220 KB at N 256 with z and the pre-gate output (every
buffer takes whole KB).

Copies: the first warpgroup issues x, z and the decay vectors, and refills a slot of them once the second
warpgroup has arrived on that slot's read barrier; each warpgroup issues and refills its own halves of B and C.
"""

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels.ssd.mosaic_gpu.common import TILE, TRANSFORMS
from pallas_kernels.ssd.mosaic_gpu.walk import WalkProgram

WARPGROUPS = 2  # the state's halves of N, one a warpgroup
ROW_SLOTS = 2  # blocks of x and decay vectors in shared memory at once (z: one)
HALF_SLOTS = 2  # blocks of each warpgroup's halves of B and C in shared memory at once
VECTORS = ("dt", "cs", "last")  # the decay vectors of a row slot, in order


def halves_scratch(dstate: int, dtype, has_z: bool) -> list:
    """The shared memory the loop adds to the walk's: x (ROW_SLOTS, 64, 64), z (64, 64), each decay vector
    (ROW_SLOTS, 64) float32, B's and C's halves (WARPGROUPS, HALF_SLOTS, 64, N / 2), the handed part of y (64, 64)
    in ``dtype``, and the barriers: rows in, rows read by the second warpgroup, halves in, y's hand-over (handed,
    taken) and z in."""
    tile16 = lambda shape: plgpu.SMEM(shape, dtype, transforms=TRANSFORMS)  # noqa: E731
    halves = (WARPGROUPS, HALF_SLOTS, TILE, dstate // WARPGROUPS)
    return [
        tile16((ROW_SLOTS, TILE, TILE)),  # x
        *([tile16((TILE, TILE))] if has_z else []),
        *(plgpu.SMEM((ROW_SLOTS, TILE), jnp.float32) for _ in VECTORS),
        tile16(halves),  # B
        tile16(halves),  # C
        tile16((TILE, TILE)),  # the second warpgroup's part of y
        plgpu.Barrier(num_arrivals=1 + len(VECTORS), num_barriers=ROW_SLOTS),
        plgpu.Barrier(num_barriers=ROW_SLOTS),
        plgpu.Barrier(num_arrivals=2, num_barriers=WARPGROUPS * HALF_SLOTS),
        plgpu.Barrier(num_barriers=2),
        *([plgpu.Barrier(num_barriers=1)] if has_z else []),
    ]


def walk_in_halves(inputs: dict, scratch: list, prog: WalkProgram, block, state: list, end_ref) -> None:
    """``block`` over the segment's blocks in each of the two warpgroups (``prog.w``), on its half of N: the loop of
    the module docstring. ``inputs``: the global x, B, C, dt, cs, last and z (or None) of ``mosaic_gpu.forward``;
    ``scratch``: ``halves_scratch``'s. ``block(k, x_s, z, vectors, piece_slot, release, state, combine)`` is
    ``mosaic_gpu.forward``'s block on one piece, this warpgroup's half; ``combine(y, outputs)`` takes this
    warpgroup's part of y and calls ``outputs`` with the whole y in the first warpgroup. ``state``: this
    warpgroup's half of the state, [(64, N / 2) float32]; its end goes to ``end_ref`` (batch, segments, H, P, N)
    float32 if given."""
    z_ref, w = inputs["z"], prog.w
    x_s, *rest = scratch
    z_s = rest.pop(0) if z_ref is not None else None
    v_s, rest = rest[: len(VECTORS)], rest[len(VECTORS) :]
    B_s, C_s, Yp_s, row_bar, read_bar, half_bar, hand_bar, *z_bar = rest
    b, h, p, first, steps = prog.b, prog.h, prog.p, prog.first, prog.steps
    half = B_s.shape[-1]
    B_w, C_w = B_s.at[w], C_s.at[w]
    wg = plgpu.Layout.WGMMA

    def in_first(fn):  # the copies of what both warpgroups read
        pl.when(w == 0)(fn)

    def fetch_rows(k, slot):
        t, bar = pl.ds((first + k) * TILE, TILE), row_bar.at[slot]
        plgpu.copy_gmem_to_smem(inputs["x"].at[b, t, h, p], x_s.at[slot], bar)
        for name, vector_s in zip(VECTORS, v_s, strict=True):
            plgpu.copy_gmem_to_smem(inputs[name].at[b, h, t], vector_s.at[slot], bar)

    def fetch_z(k):
        plgpu.copy_gmem_to_smem(z_ref.at[b, pl.ds((first + k) * TILE, TILE), h, p], z_s, z_bar[0].at[0])

    def fetch_half(k, slot):
        t, cols, bar = pl.ds((first + k) * TILE, TILE), pl.ds(w * half, half), half_bar.at[w * HALF_SLOTS + slot]
        plgpu.copy_gmem_to_smem(inputs["B"].at[b, t, prog.g, cols], B_w.at[slot], bar)
        plgpu.copy_gmem_to_smem(inputs["C"].at[b, t, prog.g, cols], C_w.at[slot], bar)

    in_first(lambda: fetch_rows(0, 0))
    if z_ref is not None:
        in_first(lambda: fetch_z(0))
    fetch_half(0, 0)
    for k in range(1, max(ROW_SLOTS, HALF_SLOTS)):
        if k < ROW_SLOTS:
            pl.when(jnp.logical_and(w == 0, k < steps))(lambda k=k: fetch_rows(k, k))
        if k < HALF_SLOTS:
            pl.when(k < steps)(lambda k=k: fetch_half(k, k))
    in_first(lambda: plgpu.barrier_arrive(hand_bar.at[1]))  # y's hand-over tile starts free

    def body(k, state):
        slot, hslot = lax.rem(k, ROW_SLOTS), lax.rem(k, HALF_SLOTS)
        plgpu.barrier_wait(row_bar.at[slot])
        arrived = []

        def piece_slot(i):
            if not arrived:  # one wait a block, before its first product
                plgpu.barrier_wait(half_bar.at[w * HALF_SLOTS + hslot])
                arrived.append((B_w.at[hslot], C_w.at[hslot]))
            return arrived[0]

        def release(i):
            pl.when(k + HALF_SLOTS < steps)(lambda: fetch_half(k + HALF_SLOTS, hslot))

        def combine(y, outputs):
            # each barrier's phases are all waited for: its arrivals are as conditional as its waits
            @pl.when(w == 1)
            def _():
                # its products have read x and the vectors: the first warpgroup may refill the slot
                pl.when(k + ROW_SLOTS < steps)(lambda: plgpu.barrier_arrive(read_bar.at[slot]))
                plgpu.barrier_wait(hand_bar.at[1])
                Yp_s[...] = y.astype(Yp_s.dtype)
                plgpu.barrier_arrive(hand_bar.at[0])

            @pl.when(w == 0)
            def _():
                plgpu.barrier_wait(hand_bar.at[0])
                whole = y + plgpu.load(Yp_s, layout=wg).astype(jnp.float32)
                pl.when(k + 1 < steps)(lambda: plgpu.barrier_arrive(hand_bar.at[1]))
                outputs(whole)

                @pl.when(k + ROW_SLOTS < steps)
                def _():
                    plgpu.barrier_wait(read_bar.at[slot])
                    fetch_rows(k + ROW_SLOTS, slot)

        def z_tile():
            plgpu.barrier_wait(z_bar[0].at[0])
            return z_s

        def z_read():
            pl.when(k + 1 < steps)(lambda: fetch_z(k + 1))

        dt, cs, last = (vector_s.at[slot] for vector_s in v_s)
        vectors = (dt, cs, last, dt, cs)  # rows, then columns
        z = (z_tile, z_read) if z_ref is not None else None
        return block(k, x_s.at[slot], z, vectors, piece_slot, release, state, combine)

    state = lax.fori_loop(0, steps, body, state)
    if end_ref is not None:
        end_ref.at[b, prog.s, h, p, pl.ds(w * half, half)][...] = state[0]
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
