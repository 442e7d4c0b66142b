"""The loop of the forward's Mosaic GPU walk (``mosaic_gpu.forward``) with B and C brought in by pieces of N's
columns, written by hand instead of ``emit_pipeline``: ``SsdConfig.fwd_walk_pieces`` > 1.

Why: at N 256 one block's B and C are 64 KB. Two pipeline stages of them beside x, z, S's copy and the staged tiles
take 211 KB, and the walk then ran slower than on one stage, where each block waits for its loads (0.431 against
0.415 ms forward at B2 L8192 H32 G4 on an H200). With B and C loaded once for the whole walk (wrong outputs, timing
only) and two stages of the rest, the same forward took 0.305 ms: the block's B and C loads, not its products, held
the walk (``docs/kernels.md#ssd-walk-at-n-256``).

x, z and the decay vectors have ROW_SLOTS slots (the next block's in flight while this one computes). B and C have
one slot per piece, one block deep: the block does piece i's products (C_i B_iᵀ into C Bᵀ, C_i S_iᵀ into C Sᵀ, and
the update of the state's columns i, S_i = exp(cs_last) S_i + Eᵀ B_i), then the slot takes the next block's piece
while the later pieces and the block's output run. The block's math is ``mosaic_gpu.forward``'s.

Shared memory at N 256 in two pieces, with z and the pre-gate output (``heuristics.walk_shared_bytes``): 2 x (x, z,
decays) 34 KB, B and C 64 KB, S's copy 32 KB, the staged update and the pre-gate output 16 KB: 146 KB.

Measured on an H200 (ms forward, one stage against two pieces): B2 L8192 H32 G4 0.421 against 0.401, B8 L2048 H24
0.316 against 0.286, B1 L16384 H24 0.326 against 0.314, far from the 0.305 and 0.215 of the probe without B and C
loads: those loads still cost most of what they cost on one stage. ncu puts neither loop near a bandwidth (L2 at 42%
and 53% of its peak at the first shape), so the cost is not the bytes; the loads' latency, which one block of lead
does not hide, is the likely one (not measured). Four pieces are slower than one stage at every N 256 shape
measured.
"""

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels.ssd.mosaic_gpu.common import TILE, TRANSFORMS
from pallas_kernels.ssd.mosaic_gpu.walk import WalkProgram

ROW_SLOTS = 2  # blocks of x, z and decay vectors in shared memory at once
VECTORS = ("dt", "cs", "last")  # the decay vectors of a row slot, in order


def piece_scratch(dstate: int, dtype, pieces: int, has_z: bool) -> list:
    """The shared memory the loop adds to the walk's: x and (with it) z (ROW_SLOTS, 64, 64), each decay vector
    (ROW_SLOTS, 64) float32, B's and C's pieces (64, N / pieces) each, and the barriers of both kinds of slot."""
    tile16 = lambda shape: plgpu.SMEM(shape, dtype, transforms=TRANSFORMS)  # noqa: E731
    width = dstate // pieces
    return [
        *(tile16((ROW_SLOTS, TILE, TILE)) for _ in range(1 + has_z)),  # x, z
        *(plgpu.SMEM((ROW_SLOTS, TILE), jnp.float32) for _ in VECTORS),
        *(tile16((TILE, width)) for _ in range(2 * pieces)),  # B's pieces, then C's
        plgpu.Barrier(num_arrivals=1 + has_z + len(VECTORS), num_barriers=ROW_SLOTS),
        plgpu.Barrier(num_arrivals=2, num_barriers=pieces),
    ]


def walk_by_pieces(inputs: dict, scratch: list, prog: WalkProgram, pieces: int, block, state: list, end_ref) -> None:
    """``block`` over the segment's blocks, the loop of the module docstring. ``inputs``: the global x, B, C, dt, cs,
    last and z (or None) of ``mosaic_gpu.forward``; ``scratch``: ``piece_scratch``'s. ``block(k, x_s, z, vectors,
    piece_slot, release, state)`` is the k-th block of the segment; it takes z's tile from ``z[0]()`` (z None
    without z), piece i's B and C tiles from ``piece_slot(i)``, calls ``release(i)`` once their products are done
    and returns the state's pieces, (64, N / pieces) float32 each. The end state goes to ``end_ref`` (batch,
    segments, H, P, N) float32 if given."""
    z_ref = inputs["z"]
    x_s, *rest = scratch
    z_s = rest.pop(0) if z_ref is not None else None
    v_s, rest = rest[: len(VECTORS)], rest[len(VECTORS) :]
    B_s, C_s, (row_bar, piece_bar) = rest[:pieces], rest[pieces : 2 * pieces], rest[2 * pieces :]
    b, h, p, first, steps = prog.b, prog.h, prog.p, prog.first, prog.steps
    width = B_s[0].shape[-1]

    def fetch_rows(k, slot):
        t, bar = pl.ds((first + k) * TILE, TILE), row_bar.at[slot]
        plgpu.copy_gmem_to_smem(inputs["x"].at[b, t, h, p], x_s.at[slot], bar)
        if z_ref is not None:
            plgpu.copy_gmem_to_smem(z_ref.at[b, t, h, p], z_s.at[slot], bar)
        for name, vector_s in zip(VECTORS, v_s, strict=True):
            plgpu.copy_gmem_to_smem(inputs[name].at[b, h, t], vector_s.at[slot], bar)

    def fetch_piece(k, i):
        t, cols, bar = pl.ds((first + k) * TILE, TILE), pl.ds(i * width, width), piece_bar.at[i]
        plgpu.copy_gmem_to_smem(inputs["B"].at[b, t, prog.g, cols], B_s[i], bar)
        plgpu.copy_gmem_to_smem(inputs["C"].at[b, t, prog.g, cols], C_s[i], bar)

    fetch_rows(0, 0)
    for i in range(pieces):
        fetch_piece(0, i)
    for k in range(1, ROW_SLOTS):
        pl.when(k < steps)(lambda k=k: fetch_rows(k, k))

    def body(k, state):
        slot = lax.rem(k, ROW_SLOTS)
        plgpu.barrier_wait(row_bar.at[slot])
        arrived = {}

        def piece_slot(i):
            if i not in arrived:  # one wait a piece and block, before its first product
                plgpu.barrier_wait(piece_bar.at[i])
                arrived[i] = (B_s[i], C_s[i])
            return arrived[i]

        def release(i):
            pl.when(k + 1 < steps)(lambda: fetch_piece(k + 1, i))

        dt, cs, last = (vector_s.at[slot] for vector_s in v_s)
        vectors = (dt, cs, last, dt, cs)  # rows, then columns
        z = (lambda: z_s.at[slot], lambda: None) if z_ref is not None else None
        state = block(k, x_s.at[slot], z, vectors, piece_slot, release, state)
        pl.when(k + ROW_SLOTS < steps)(lambda: fetch_rows(k + ROW_SLOTS, slot))  # its reads end in the block's fence
        return state

    state = lax.fori_loop(0, steps, body, state)
    if end_ref is not None:
        for i, piece in enumerate(state):
            end_ref.at[b, prog.s, h, p, pl.ds(i * width, width)][...] = piece
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
