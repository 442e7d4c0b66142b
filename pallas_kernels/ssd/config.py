"""Tiling of the Pallas SSD kernels: how long a block of time a program takes per step, how many head dims it owns.

Time is cut into blocks of ``block_l`` positions. Sequential passes (one program per batch row, head,
``state_block_p`` head dims and ``state_block_n`` of the state's N columns) walk the blocks carrying that tile of
the float32 state, or of its gradient in the backward, and store it per block; everything else runs block-parallel
as the quadratic (attention-like) SSD form on tensor cores: the forward output with one program per block, head and
``block_p`` head dims (C·Bᵀ per group: see ``shared_scores`` below), or, for L <= ``fused_forward_max_l``, one fused
sequential forward per batch row, head and ``block_p`` head dims that needs no stored states; the backward's
per-head gradients with one program per block, head and ``bwd_block_p`` head dims (their ddt, dA and d dt_bias
partials, linear in the head dims, summed by XLA; ``bwd_persistent_programs`` makes that kernel that many programs
looping over the tiles, so that Triton prefetches the next tile's loads; ``bwd_rowwise_dcs`` takes its decay
gradient from (T, P) row sums instead of the (T, T) dM's row and column sums; ``bwd_state_chunk`` runs its products
with the states over ``bwd_state_chunk`` of N's columns at a time); dB and dC with ``bwd_head_splits``
programs per block and group, each looping over its share of the group's heads so that they sum in registers.
``block_l`` is the kernels' own chunk: it changes rounding only, never the result (mamba-ssm's ``chunk_size`` is
accepted and checked but does not tile these kernels).

The backward reads every block's incoming state. With ``checkpoint_every`` the forward keeps (in float32) only every
that many positions' state, and the backward first rebuilds the block states from them with one more sequential
pass whose segments run in parallel; a layer's block states then exist only during its own backward.
``default_config`` keeps every block's state while they are small (the rebuild costs time) and every
KEEP_EVERY positions beyond KEEP_ALL_MAX_BYTES (every LONG_SEGMENT where its state passes are two-level from
LONG_SEGMENT_MIN_L).

With ``two_level_states`` the sequential state passes (forward states, backward state gradients) become two levels
over segments of ``checkpoint_every`` positions (``state_segment`` where every block's state is kept): each
segment's own contribution and decay, all segments in parallel; an elementwise walk over the segments
(``segments``); then the per-block values, all segments in parallel again. For few batch rows x heads at long L,
where the one-level passes have fewer programs than SMs and walk many blocks. With ``fused_segments`` the forward's
third level is the fused forward's walk, once per segment: it computes the outputs from each segment's incoming state
instead of storing every block's state for a separate output pass. Without ``two_level_backward`` only the forward
is two-level: where whole-head tiles fill the GPU, the backward's one-level pass walks each block once instead of
twice.

With ``bwd_dx_mosaic`` (``default_config`` sets it on Hopper GPUs) the backward's per-head kernel runs on Pallas's
Mosaic GPU backend (``kernel_bwd_mosaic``) where that kernel covers the shape, else on Triton as every other kernel.
With ``bwd_dbc_mosaic`` (``default_config`` sets it on Hopper GPUs up to N 128 and P 64) the dB/dC kernel does
too (``kernel_bwd_dbc_mosaic``), on ``bwd_dbc_columns`` of N's columns a program. With ``fwd_mosaic``
(``default_config`` sets it on Hopper GPUs) the forward's fused walks, whole (``fused_forward_max_l``) or per segment
(``fused_segments``), run on Mosaic GPU (``kernel_fwd_mosaic``) where it covers the shape; its state does not spill
at N 256, so there the fused walks are the default too. With ``states_mosaic`` (set with it) so do the sequential
state passes, forward and backward, one- or two-level (``kernel_states_mosaic``; the walks over segments stay Triton).
``fwd_walk_stages`` is the Mosaic walk's pipeline depth: one lets two of its programs share an SM up to N 192.
``fwd_walk_pieces`` > 1 replaces that pipeline by a hand-made loop that keeps two blocks of x, z and the decay
vectors in flight and one of B and C, in pieces of N's columns, each refilled once its products are done
(``kernel_fwd_mosaic_pieces``): at N 256 two stages of all four take 211 KB and ran slower than one.
``fwd_walk_warpgroups`` 2 holds the walk's state in halves of N on two warpgroups of a program, each loading its
halves of B and C two blocks ahead (``kernel_fwd_mosaic_halves``): at N 256 one warpgroup's whole state spills.

With ``shared_scores`` (the default) the forward's output and the backward's per-head kernel read each block's C·Bᵀ
(T, T), float32, computed once per group by XLA (``block.block_scores``), instead of each program (head, head dims)
recomputing it (``docs/kernels.md#ssd-kernels``); ``default_config`` turns it off where each group has one head.
"""

import dataclasses

from pallas_kernels._triton import next_pow2

MAX_HEADDIM = 128
MAX_DSTATE = 256
MIN_DOT = 16  # Triton's smallest dot dimension


@dataclasses.dataclass(frozen=True)
class SsdConfig:
    block_l: int = 64  # positions per block (the granularity of the stored states)
    block_p: int = 64  # forward output pass: head dims per program (clipped to headdim)
    num_warps: int = 4
    num_stages: int = 2  # Triton software-pipelining depth (it prefetches the sequential passes' loads)
    fused_forward_max_l: int = 8192  # forward as one sequential pass (no stored states) when L <= this; 0: never
    persistent_programs: int = 0  # split forward's output pass: 0 one program per tile; n > 0 n programs looping
    state_block_p: int = 16  # sequential state passes (forward states, backward state gradients)
    state_block_n: int = 0  # sequential state passes: state columns (of N) per program; 0: all
    rebuild_block_p: int = 64  # the backward's rebuild of the block states from the kept ones: head dims per program
    state_num_warps: int = 4
    bwd_num_warps: int = 8  # backward per-head kernel (dx, dz, ddt, dA, dD, d dt_bias); whole 64-dim heads spill at 4
    bwd_block_p: int = MAX_HEADDIM  # backward per-head kernel: head dims per program (clipped to headdim)
    bwd_persistent_programs: int = 0  # backward per-head kernel: 0 one program per tile; n > 0 n programs looping
    bwd_rowwise_dcs: bool = False  # backward per-head kernel: d cs from row sums only (no (T, T) dM, no column sums)
    bwd_state_chunk: int = 0  # backward per-head kernel: state columns per step of its state products; 0: all N
    bwd_head_splits: int = 4  # backward dB/dC kernel: programs sharing a group's heads (at most; rounded to a divisor)
    dbc_num_warps: int = 8
    bwd_num_stages: int = 2
    checkpoint_every: int = 0  # positions between the states kept for the backward (a multiple of block_l; 0: all)
    shared_scores: bool = True  # C·Bᵀ of each block and group once (XLA), read by the per-head kernels
    two_level_states: bool = False  # state passes segment-parallel plus a walk over segments
    state_segment: int = 1024  # two-level passes, all states kept: positions per segment (a multiple of block_l)
    fused_segments: bool = False  # two-level forward: outputs by a fused walk per segment (no block-state pass)
    two_level_backward: bool = True  # with two_level_states: the backward's state-gradient pass in two levels too
    bwd_dx_mosaic: bool = False  # backward per-head kernel on Mosaic GPU (``kernel_bwd_mosaic``) where it covers
    bwd_dbc_mosaic: bool = False  # backward dB/dC kernel on Mosaic GPU (``kernel_bwd_dbc_mosaic``) where it covers
    bwd_dbc_columns: int = 128  # ... N's columns per program there (64 or 128: its two float32 accumulators' width)
    fwd_mosaic: bool = False  # the forward's fused walks (whole or per segment) on Mosaic GPU (``kernel_fwd_mosaic``)
    states_mosaic: bool = False  # the sequential state passes (both ways) on Mosaic GPU (``kernel_states_mosaic``)
    fwd_walk_stages: int = 2  # ... the forward's walk there: blocks whose inputs are in shared memory at once
    fwd_walk_pieces: int = 1  # ... > 1: its B and C in pieces of N's columns, a slot each, by a hand-made loop
    fwd_walk_warpgroups: int = 1  # ... 2: its state in halves of N on two warpgroups, B and C two blocks ahead

    def validate(self) -> None:
        for name in ("block_l", "block_p", "state_block_p", "bwd_block_p", "rebuild_block_p"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < MIN_DOT or value != next_pow2(value):
                raise ValueError(f"SsdConfig.{name} must be a power of two >= {MIN_DOT}, got {value!r}")
        for name in ("num_warps", "state_num_warps", "bwd_num_warps", "dbc_num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"SsdConfig.{name} must be a positive power of two, got {value!r}")
        for name in ("num_stages", "bwd_num_stages", "bwd_head_splits", "fwd_walk_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SsdConfig.{name} must be a positive int, got {value!r}")
        every = self.checkpoint_every
        if not isinstance(every, int) or every < 0 or every % self.block_l:
            raise ValueError(
                f"SsdConfig.checkpoint_every must be 0 or a positive multiple of block_l={self.block_l}, got {every!r}"
            )
        segment = self.state_segment
        if not isinstance(segment, int) or segment <= 0 or segment % self.block_l:
            raise ValueError(
                f"SsdConfig.state_segment must be a positive multiple of block_l={self.block_l}, got {segment!r}"
            )
        for name in (
            "shared_scores",
            "two_level_states",
            "bwd_rowwise_dcs",
            "fused_segments",
            "two_level_backward",
            "bwd_dx_mosaic",
            "bwd_dbc_mosaic",
            "fwd_mosaic",
            "states_mosaic",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"SsdConfig.{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("state_block_n", "bwd_state_chunk"):
            n = getattr(self, name)
            if not isinstance(n, int) or (n != 0 and (n < MIN_DOT or n != next_pow2(n))):
                raise ValueError(f"SsdConfig.{name} must be 0 or a power of two >= {MIN_DOT}, got {n!r}")
        if self.fwd_walk_pieces not in (1, 2, 4):
            raise ValueError(f"SsdConfig.fwd_walk_pieces must be 1, 2 or 4, got {self.fwd_walk_pieces!r}")
        if self.fwd_walk_warpgroups not in (1, 2):
            raise ValueError(f"SsdConfig.fwd_walk_warpgroups must be 1 or 2, got {self.fwd_walk_warpgroups!r}")
        if self.bwd_dbc_columns not in (64, 128):
            raise ValueError(f"SsdConfig.bwd_dbc_columns must be 64 or 128, got {self.bwd_dbc_columns!r}")
        for name in ("fused_forward_max_l", "persistent_programs", "bwd_persistent_programs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"SsdConfig.{name} must be an int >= 0, got {value!r}")


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
SM_SHARED_BYTES = 228 * 1024  # Hopper: shared memory an SM shares among its programs, less 1 KB for each
PROGRAM_RESERVED_BYTES = 1024  # ... the 1 KB each program's share loses
PAIRED_WALK_SLOWDOWN = 1.85  # a Mosaic walk program's time with a second one on its SM (130m's, measured)
WALK_WARPGROUPS = 2  # the Mosaic walk's state in halves of N on this many warpgroups past N = WIDE_TILE_MAX_DSTATE
WALK_PIECES = 2  # ... else (one warpgroup) its B and C in this many pieces of N's columns


def walk_shared_bytes(dstate: int, stages: int, pieces: int = 1, warpgroups: int = 1) -> int:
    """Shared memory of one Mosaic forward-walk program on 64 head dims (``kernel_fwd_mosaic``), with z and the
    pre-gate output kept: ``stages`` blocks' x, z, B, C and five decay vectors, then S, the staged update and the
    pre-gate output. With B and C in ``pieces`` > 1 (``kernel_fwd_mosaic_pieces``): two blocks' x, z and three decay
    vectors, one block's B and C. With the state in halves on two ``warpgroups`` (``kernel_fwd_mosaic_halves``): two
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
