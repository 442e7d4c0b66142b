"""The default tiling of the Pallas SSD for a shape and a GPU (``default_config``) and the helpers its rules use.

Each rule is one line of ``default_config``'s docstring; the measurements behind them are in
``docs/kernels.md#ssd-default-config``.
"""

import dataclasses

from pallas_kernels._mosaic_gpu import PROGRAM_RESERVED_BYTES, SM_SHARED_BYTES
from pallas_kernels._triton import next_pow2
from pallas_kernels.ssd.config import SsdConfig

KEEP_ALL_MAX_BYTES = 256 * 2**20  # the block states of one call (in the dot dtype) kept whole up to this size
KEEP_EVERY = 1024  # positions between the kept states beyond it: 1/8 of the bytes at block_l 64 (float32 vs bf16)
BWD_SPLIT_MAX_DSTATE = 128  # the backward's per-head programs split head dims by 32 at 4 warps up to this N
STATE_PASS_PROGRAMS_PER_SM = 1.9  # sequential passes: wider head-dim tiles while about 2 programs per SM remain
WIDE_STATE_TILE_MIN_L = 16384  # ... and 32-dim tiles (two per head) only for walks this long
TWO_LEVEL_MIN_L = 16384  # two-level state passes for walks this long without whole-head tiles' programs
FUSED_SEGMENTS_MIN_L = 8192  # ... over KEEP_EVERY from this L where the forward is split and can fuse its segments
LONG_SEGMENT_MIN_L = 65536  # ... over segments of LONG_SEGMENT positions from this L on, else of KEEP_EVERY
LONG_SEGMENT = 2048
FEW_PROGRAMS_PER_SM = 0.25  # a split forward this short of programs: two levels with fused segments below L 8192 too
SHORT_SEGMENTS_MIN_L = 2048  # ... from this L (eight segments of SHORT_SEGMENT)
SHORT_SEGMENT = 256  # ... over segments of 1/SEGMENTS_PER_WALK of L (rounded up to a power of two), at least this
SEGMENTS_PER_WALK = 16
PARTIAL_WAVE_SEGMENT = 512  # with more (but fewer than the SMs) below L 8192: segments of 512, the backward one-level
MOSAIC_ONE_LEVEL_PROGRAMS_PER_SM = 0.9  # Mosaic state passes: the backward's one-level from this many 64-dim heads
WIDE_TILE_MAX_DSTATE = 128  # the fused forward, 32- or 64-dim sequential tiles and dB/dC head splits only up to this N
ONE_DBC_PROGRAM_PER_SM = 0.9  # dB/dC: one program per block and group where these many per SM remain without splits
MOSAIC_DBC_MAX_HEADDIM = 64  # dB/dC on Mosaic GPU up to this P (one pipeline step a head; N up to WIDE_TILE_MAX_DSTATE)
PAIRED_WALK_SLOWDOWN = 1.85  # a Mosaic walk program's time with a second one on its SM (130m's, measured)
WALK_WARPGROUPS = 2  # the Mosaic walk's state in halves of N on this many warpgroups past N = WIDE_TILE_MAX_DSTATE
WALK_PIECES = 2  # ... else (one warpgroup) its B and C in this many pieces of N's columns


def walk_shared_bytes(dstate: int, stages: int, pieces: int = 1, warpgroups: int = 1) -> int:
    """Shared memory of one Mosaic forward-walk program on 64 head dims (``mosaic_gpu.forward``), with z and the
    pre-gate output kept: ``stages`` blocks' x, z, B, C and five decay vectors, then S, the staged update and the
    pre-gate output. With B and C in ``pieces`` > 1 (``mosaic_gpu.forward_pieces``): two blocks' x, z and three decay
    vectors, one block's B and C. With the state in halves on two ``warpgroups`` (``mosaic_gpu.forward_halves``): two
    blocks' x, B, C and decay vectors, one of z, each warpgroup's staged update, the handed part of y, D; every
    buffer in whole KB (Mosaic GPU aligns each to 1024 bytes)."""
    tile, two, four = 64, 2, 4  # positions and head dims; bytes of a 16-bit element, of a float32
    fixed = (tile * dstate + 2 * tile * tile) * two
    if warpgroups > 1:
        kb = 1024
        vectors = 3 * -(-2 * tile * four // kb) * kb + kb  # three decay vectors, two blocks each; D
        return 2 * 2 * tile * dstate * two + (2 + 1 + 2 + 1 + 1) * tile * tile * two + tile * dstate * two + vectors
    if pieces > 1:
        return 2 * (2 * tile * tile * two + 3 * tile * four) + 2 * tile * dstate * two + fixed
    per_stage = (2 * tile * tile + 2 * tile * dstate) * two + 5 * tile * four
    return stages * per_stage + fixed


def walk_programs_per_sm(dstate: int, stages: int) -> int:
    """How many Mosaic forward-walk programs (``walk_shared_bytes``) an SM's shared memory holds at once."""
    return SM_SHARED_BYTES // (walk_shared_bytes(dstate, stages) + PROGRAM_RESERVED_BYTES)


def walk_pieces_fit(dstate: int, pieces: int) -> bool:
    """Whether N splits into ``pieces`` pieces of whole 64-column tiles (``SsdConfig.fwd_walk_pieces``)."""
    return dstate % (64 * pieces) == 0


def walk_stages(walk_programs: int, dstate: int, sm_count: int) -> int:
    """Pipeline stages of the Mosaic forward walk (``SsdConfig.fwd_walk_stages``): one where that lets two programs
    share an SM and the waves of programs that then take (at PAIRED_WALK_SLOWDOWN each) are fewer than alone, and
    past N = WIDE_TILE_MAX_DSTATE (one program an SM either way); else two."""
    if dstate > WIDE_TILE_MAX_DSTATE:
        return 1
    if walk_programs_per_sm(dstate, 2) >= 2 or walk_programs_per_sm(dstate, 1) < 2:
        return 2
    alone = -(-walk_programs // sm_count)
    return 1 if -(-walk_programs // (2 * sm_count)) * PAIRED_WALK_SLOWDOWN < alone else 2


def keeping_states_every(config: SsdConfig, every: int) -> SsdConfig:
    """``config`` with the forward keeping, for the backward, the state every ``every`` positions (0: every block's),
    the two-level passes' segments matched to it where they run: trades the kept states' memory, (batch,
    L / every, H, P, N) float32 against (batch, L / block_l, H, P, N) in x's dtype, for a rebuild in the backward."""
    if every == 0:
        return dataclasses.replace(config, checkpoint_every=0)
    segment = {"state_segment": every} if config.two_level_states else {}
    return dataclasses.replace(config, checkpoint_every=every, **segment)


def default_config(
    batch: int,
    seqlen: int,
    nheads: int,
    headdim: int,
    dstate: int,
    itemsize: int,
    sm_count: int = 132,
    *,
    ngroups: int = 1,
    wgmma: bool = True,
    walk_warpgroups: int = WALK_WARPGROUPS,
) -> SsdConfig:
    """``SsdConfig()`` tiled for these shapes and this GPU (``sm_count`` SMs, ``wgmma``: Hopper's tensor-core
    instructions; ``walk_warpgroups``: the most warpgroups a Mosaic walk program may have, fewer under Pallas's
    interpreter, ``api.pallas_config``). "Programs" are batch x heads x head-dim tiles. The rules, each measured
    against its alternative in ``docs/kernels.md#ssd-default-config``:

    - Mosaic GPU kernels with ``wgmma`` where they cover the shape: the backward's per-head kernel always, dB/dC up
      to N = WIDE_TILE_MAX_DSTATE and P = MOSAIC_DBC_MAX_HEADDIM, the forward's walks and the state passes for
      16-bit inputs with L, P and N in 64s;
    - the fused forward only where its programs fill the SMs (and, past N = WIDE_TILE_MAX_DSTATE, only on Mosaic);
    - ``shared_scores`` only where a group has more than one head; ``bwd_rowwise_dcs`` everywhere;
    - the Triton per-head backward on 32 head dims at 4 warps up to N = BWD_SPLIT_MAX_DSTATE;
    - up to N = WIDE_TILE_MAX_DSTATE, sequential passes on 64-dim tiles where batch x heads gives
      STATE_PASS_PROGRAMS_PER_SM x ``sm_count`` programs, on 32 from L = WIDE_STATE_TILE_MIN_L where two tiles a
      head do, else on 16;
    - two-level state passes from L = TWO_LEVEL_MIN_L without whole-head tiles, and from SHORT_SEGMENTS_MIN_L where
      the forward is split and can fuse its segments (its outputs then from a fused walk per segment): segments of
      L / SEGMENTS_PER_WALK (at least SHORT_SEGMENT) with few programs (FEW_PROGRAMS_PER_SM) below TWO_LEVEL_MIN_L,
      of PARTIAL_WAVE_SEGMENT with a partial wave below FUSED_SEGMENTS_MIN_L, else of KEEP_EVERY (LONG_SEGMENT from
      LONG_SEGMENT_MIN_L);
    - the backward's state gradients one-level where whole-head tiles fill the GPU, with a partial wave, past
      N = WIDE_TILE_MAX_DSTATE, or where Mosaic heads give MOSAIC_ONE_LEVEL_PROGRAMS_PER_SM x ``sm_count`` programs;
    - one dB/dC program a group where batch x blocks x groups gives ONE_DBC_PROGRAM_PER_SM x ``sm_count``
      programs, and past N = WIDE_TILE_MAX_DSTATE;
    - the Mosaic walk on one pipeline stage where pairing its programs cuts their waves, and past
      N = WIDE_TILE_MAX_DSTATE (``walk_stages``); there its state in halves on WALK_WARPGROUPS warpgroups where a
      program may have them, else its B and C in WALK_PIECES pieces;
    - every block's state kept up to KEEP_ALL_MAX_BYTES, else one every ``state_segment`` or KEEP_EVERY positions."""
    wide_tiles = dstate <= WIDE_TILE_MAX_DSTATE
    # the forward's walk on Mosaic GPU where it covers these sizes (in 64s, 16-bit: its own check at the call)
    walk = wgmma and itemsize == 2 and all(size % 64 == 0 for size in (seqlen, headdim, dstate))
    config = SsdConfig(
        shared_scores=nheads > ngroups,
        bwd_rowwise_dcs=True,
        bwd_dx_mosaic=wgmma,
        bwd_dbc_mosaic=wgmma and wide_tiles and headdim <= MOSAIC_DBC_MAX_HEADDIM,
        fwd_mosaic=walk,
        states_mosaic=walk,
    )
    enough = STATE_PASS_PROGRAMS_PER_SM * sm_count
    head_tiles = batch * nheads * -(-headdim // 64)  # 64-dim head parts: the state passes' programs on whole heads
    whole_heads = head_tiles >= enough
    mosaic_heads_fill = walk and head_tiles >= MOSAIC_ONE_LEVEL_PROGRAMS_PER_SM * sm_count
    fused_walks = wide_tiles or walk  # the Triton walks spill past WIDE_TILE_MAX_DSTATE, the Mosaic one does not
    if not wide_tiles:
        whole_walk = config.fused_forward_max_l if walk else 0
        config = dataclasses.replace(config, bwd_head_splits=1, fused_forward_max_l=whole_walk)
    elif whole_heads:
        config = dataclasses.replace(config, state_block_p=64)
    elif seqlen >= WIDE_STATE_TILE_MIN_L and batch * nheads * -(-headdim // 32) >= enough:
        config = dataclasses.replace(config, state_block_p=32)
    every = KEEP_EVERY
    programs = batch * nheads * -(-headdim // min(config.block_p, headdim))  # the fused forward's
    split_forward = programs < sm_count or seqlen > config.fused_forward_max_l
    fusable = fused_walks and split_forward
    # a split forward that can fuse its segments goes two-level from SHORT_SEGMENTS_MIN_L: over the few-program or
    # partial-wave segments below FUSED_SEGMENTS_MIN_L (TWO_LEVEL_MIN_L for few programs), the longer walks' beyond
    two_level_min_l = SHORT_SEGMENTS_MIN_L if fusable else TWO_LEVEL_MIN_L
    few_programs = programs <= FEW_PROGRAMS_PER_SM * sm_count
    short_segments = fusable and few_programs and seqlen < TWO_LEVEL_MIN_L
    partial_wave = fusable and not few_programs and seqlen < FUSED_SEGMENTS_MIN_L  # so programs < sm_count
    if seqlen >= two_level_min_l and (fusable or not whole_heads):
        every = LONG_SEGMENT if seqlen >= LONG_SEGMENT_MIN_L else KEEP_EVERY
        if short_segments:
            every = max(SHORT_SEGMENT, next_pow2(seqlen) // SEGMENTS_PER_WALK)
        elif partial_wave:
            every = PARTIAL_WAVE_SEGMENT
        config = dataclasses.replace(
            config,
            two_level_states=True,
            state_segment=every,
            fused_segments=fused_walks,
            two_level_backward=not (whole_heads or partial_wave or not wide_tiles or mosaic_heads_fill),
        )
    if dstate <= BWD_SPLIT_MAX_DSTATE:
        config = dataclasses.replace(config, bwd_block_p=32, bwd_num_warps=4)
    blocks = -(-seqlen // config.block_l)  # per sequence; no rule here changes block_l
    if batch * blocks * ngroups >= ONE_DBC_PROGRAM_PER_SM * sm_count:
        config = dataclasses.replace(config, bwd_head_splits=1)
    if programs < sm_count:
        config = dataclasses.replace(config, fused_forward_max_l=0)
    if walk:
        segments = -(-seqlen // config.state_segment) if config.two_level_states and config.fused_segments else 1
        walk_programs = head_tiles * segments  # the walk's P is in 64s
        config = dataclasses.replace(config, fwd_walk_stages=walk_stages(walk_programs, dstate, sm_count))
        halves = walk_warpgroups >= WALK_WARPGROUPS and walk_pieces_fit(dstate, WALK_WARPGROUPS)
        if dstate > WIDE_TILE_MAX_DSTATE and halves:
            config = dataclasses.replace(config, fwd_walk_warpgroups=WALK_WARPGROUPS)
        elif dstate > WIDE_TILE_MAX_DSTATE and walk_pieces_fit(dstate, WALK_PIECES):
            config = dataclasses.replace(config, fwd_walk_pieces=WALK_PIECES)
    saved = batch * blocks * nheads * headdim * dstate * itemsize
    return dataclasses.replace(config, checkpoint_every=every) if saved > KEEP_ALL_MAX_BYTES else config
