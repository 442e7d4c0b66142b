"""The default tiling of the Pallas selective scan for a shape and a GPU (``default_config``) and the rules it and the
chunked design use: steps per forward segment (``segment_length``), the sequential backward's unroll
(``sequential_bwd_unroll``). The measurements behind them are in ``docs/kernels.md#selective-scan-default-config``.
"""

import dataclasses

from pallas_kernels._mosaic_gpu import PROGRAM_RESERVED_BYTES, SM_SHARED_BYTES
from pallas_kernels._triton import next_pow2
from pallas_kernels.selective_scan.config import ScanConfig

FULL_PROGRAMS = 1024  # one-warp programs that fill an H100 without splitting time (130m: 1536)
SEGMENT_FILL = 2048  # below that, split L into segments until about this many programs run
KEEP_EVERY = 256  # steps between the states a default forward keeps for the backward: 1/32 of them at chunks of 8
FILL_PROGRAMS = 512  # about 4 one-warp programs per SM of an H100/H200: below this, narrower or time-parallel
SM_COUNT = 132  # H100 / H200 SXM: the default where the device does not say
# The sequential backward's one-warp programs resident per SM at N = 16 by their registers (sm_90, compiled:
# tools/pallas_sass_report.py): 168 per thread with bwd_unroll 2, 254 with 4.
RESIDENT_PER_SM = {2: 12, 4: 8}


def segment_length(config: ScanConfig, seqlen: int, programs: int) -> int:
    """Steps per forward segment of the chunked design: ``config.segments`` segments, or with 0 one segment when
    the programs of one (batch x groups x channel blocks) fill the GPU, else enough segments for SEGMENT_FILL
    programs; always a multiple of the forward's chunk and of the backward's, where the forward saves states."""
    step = max(config.save_every, config.rows)
    count = config.segments or (1 if programs >= FULL_PROGRAMS else -(-SEGMENT_FILL // programs))
    length = -(-seqlen // count)
    return max(step, -(-length // step) * step)


MOSAIC_MIN_SEGMENT = 256  # steps: below that, a boundary pass is a large share of a segment's walk (a design estimate)
# The Mosaic GPU backward, the longest pass, decides the segments. ncu on an H100 (130m, N 16, blocks of 8 steps):
# 255 registers a thread and 100,368 bytes of shared memory, so 2 one-warpgroup programs an SM by either. Its walk
# is bound by stalls, not by the SM's units (21% of issue slots busy at 2 an SM), so a wave takes as long with one
# program on an SM as with two: the time is waves x steps a segment (at 130m, 4, 5, 8 and 11 segments: 1024, 820,
# 768 and 748 step-times by that count against 2183, 1768, 1654 and 1664 us measured, 2.13-2.22 us a step-time;
# docs/kernels.md#selective-scan-what-bounds-each-pass).
MOSAIC_BWD_RESIDENT = 2  # by registers, measured at N 16; other N assumed the same (the kernel loops over states)
MOSAIC_BWD_SMEM_AT_16 = 100_368  # bytes a program at N 16; each state adds four (128,) float32 rows
MOSAIC_WAVE_SLACK = 0.05  # fewer segments win within this share of the shortest walk: each adds boundary work


def mosaic_backward_resident(dstate: int) -> int:
    """One-warpgroup Mosaic GPU backward programs an SM holds at N = ``dstate``: MOSAIC_BWD_RESIDENT by registers,
    fewer where its shared memory (counted from the N 16 measurement) does not fit."""
    smem = MOSAIC_BWD_SMEM_AT_16 + (dstate - 16) * 4 * 128 * 4
    return max(1, min(MOSAIC_BWD_RESIDENT, SM_SHARED_BYTES // (smem + PROGRAM_RESERVED_BYTES)))


def mosaic_segments(programs: int, seqlen: int, sm_count: int = SM_COUNT, resident: int = MOSAIC_BWD_RESIDENT) -> int:
    """Segments of L for the Mosaic GPU kernels (``programs`` = batch x dim / 128 a segment, ``resident`` programs
    an SM): of the counts whose segments have at least MOSAIC_MIN_SEGMENT steps, the one with the shortest walk,
    waves of resident x ``sm_count`` programs times steps a segment (a wave walks a whole segment however few
    programs it holds), or the fewest segments within MOSAIC_WAVE_SLACK of it."""
    slots = resident * sm_count
    counts = range(1, max(1, seqlen // MOSAIC_MIN_SEGMENT) + 1)
    walk = {count: -(-programs * count // slots) * -(-seqlen // count) for count in counts}
    shortest = min(walk.values())
    return min(count for count in counts if walk[count] <= shortest * (1 + MOSAIC_WAVE_SLACK))


MOSAIC_CHUNK = 8  # the Mosaic GPU backward's steps a block: registers hold about ten rows of each of its steps


def mosaic_config(config: ScanConfig) -> ScanConfig:
    """``config`` with both passes on Mosaic GPU (blocks of MOSAIC_CHUNK steps in the backward), its kept states
    and segments unchanged."""
    return dataclasses.replace(config, fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", chunk=MOSAIC_CHUNK)


def sequential_bwd_unroll(programs: int, sm_count: int = SM_COUNT) -> int:
    """bwd_unroll for ``programs`` sequential-backward programs: 4 (twice the steps in flight per program, 10% faster
    per wave) unless its larger register file needs more waves of programs than 2 does. Each wave costs a whole
    walk of L, so the count of waves decides (measured on an H100: docs/kernels.md#selective-scan-default-config)."""
    waves = {u: -(-programs // (per_sm * sm_count)) for u, per_sm in RESIDENT_PER_SM.items()}
    return 4 if waves[4] == waves[2] else 2


def default_config(
    dstate: int,
    dim_per_group: int,
    programs_per_channel: int = 1,
    checkpoint_every: int = KEEP_EVERY,
    sm_count: int = SM_COUNT,
) -> ScanConfig:
    """The tiling measured best on an H100 for N = 16, scaled for N (docs/kernels.md#selective-scan-default-config).

    ``programs_per_channel`` is batch x groups. Where batch x groups x channel blocks of 8 gives at least
    FILL_PROGRAMS one-warp programs, the backward is the sequential design's (8 channels per program, states every
    8 steps, ``sequential_bwd_unroll`` steps reversed together on ``sm_count`` SMs) and the forward the chunked
    one with chunks of 16 steps (saving states inside them); otherwise the backward is the chunked design's (every
    chunk of 8 steps in parallel) and the forward's chunks have 8 steps, with segments of L in parallel. Either
    way the forward keeps the state only every ``checkpoint_every`` steps (KEEP_EVERY; 0 keeps every state the
    backward reads: no rebuild, more memory) and the backward rebuilds the rest. Forward tiles (rows, Np, block_d)
    hold at most 2048 elements per warp (block_d 8 at N = 16), the chunked backward's 512.
    """
    np_ = next_pow2(dstate)
    block = min(max(1, 128 // np_), next_pow2(dim_per_group))
    sequential_block = max(1, min(block, 128 // np_))
    programs = programs_per_channel * -(-dim_per_group // sequential_block)
    if programs >= FILL_PROGRAMS:
        unroll = sequential_bwd_unroll(programs, sm_count)
        rows, backward = 16, dict(bwd_design="sequential", bwd_block_d=sequential_block, chunk=8, bwd_unroll=unroll)
    else:
        bwd_rows, bwd_block = 8, max(1, min(8, 128 // np_, next_pow2(dim_per_group)))
        bwd_warps = min(8, max(1, bwd_rows * np_ * bwd_block // 512))
        rows = 8
        backward = dict(bwd_design="chunked", bwd_rows=bwd_rows, bwd_block_d=bwd_block, bwd_num_warps=bwd_warps)
    warps = max(1, rows * np_ * block // 2048)
    return ScanConfig(
        design="chunked", block_d=block, num_warps=warps, rows=rows, checkpoint_every=checkpoint_every, **backward
    )
