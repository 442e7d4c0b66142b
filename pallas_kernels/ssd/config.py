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
recomputing it. On an H100 (``benchmarks/kernels/h100-2026-11-25-ssd-shared*``) the fused forward took 228 against
281 us at 130m and 446 against 521 at 2.7b, ``ssd_bwd_dx`` 10.36 against 10.67 ms at B1 L65536 H128;
``default_config`` turns it off where each group has one head.
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
PAIRED_WALK_SLOWDOWN = 1.85  # a Mosaic walk program's time with a second one on its SM (measured, next rules)
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
    share an SM and the rounds of programs that then take (at PAIRED_WALK_SLOWDOWN each) are fewer than alone, and
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
    """``SsdConfig()`` with twenty rules for the shapes and the GPU (``walk_warpgroups``: the most warpgroups a
    Mosaic walk program may have; Pallas's interpreter may lack the threads for two, ``api.pallas_config``):

    - the fused forward only where its programs (batch x heads x head-dim tiles) fill the GPU's ``sm_count``
      SMs: on an H100 (forward ms, fused / split, ``benchmarks/kernels/h100-2026-11-24-ssd-fused-vs-split*``) it
      won with 192, 256 and 320 programs (130m 0.20 / 0.28, b4 L4096 H64 0.42 / 0.79, 2.7b 0.38 / 0.50) and lost
      with 64 and 128 (B2 L8192 H32 0.65 / 0.42 at N 128, 1.07 / 0.65 at N 256; B16 L512 H8 0.13 / 0.10);
    - the state kept only every KEEP_EVERY positions where every block's state for the backward
      (batch, L / block_l, H, P, N) in the inputs' dtype (``itemsize`` bytes) would exceed KEEP_ALL_MAX_BYTES: the
      mamba2-130m and 2.7b layers at L 2048 keep all (100 and 168 MB), a 65536-long sequence of 128 heads 1/16 of
      2 GB (every LONG_SEGMENT positions: its state passes are two-level, last rule);
    - the backward's per-head kernel (``ssd_bwd_dx``) on 32 head dims per program at 4 warps, not whole heads at
      8, up to N = BWD_SPLIT_MAX_DSTATE: on an H100 (``benchmarks/kernels/h100-2026-11-25-ssd-bwd-split*``) 551
      against 665 us at 130m and 890 against 1053 at 2.7b (N 128); at N 256 (B2 L8192 H32) 1289 against 1273;
    - the sequential state passes on whole 64-dim heads where batch x heads alone gives STATE_PASS_PROGRAMS_PER_SM x
      ``sm_count`` programs, on 32 head dims where that takes two tiles per head and L >= WIDE_STATE_TILE_MIN_L,
      else on 16: a wider tile repeats the per-block decay work fewer times, fewer programs hide less latency,
      and a short walk gains little. On an H100 (``benchmarks/kernels/h100-2026-11-25-ssd-state-rows*`` and
      ``...-ssd-final*``, ``ssd_bwd_dstates`` us at tiles 16 / 32 / 64): 2.7b 305 / 290 / 214 (320 programs at 64),
      B4 L4096 H64 462 / - / 243, B1 L65536 H128 4674 / 3162 / 3431 (256 programs at 32); 130m 151 / 188 / -
      (384 at 32, L 2048), B16 L512 H8 24 / 31 / -, B2 L8192 H32 288 / 491 / 516. Splitting N instead
      (``state_block_n``) was slower everywhere (``...-ssd-state-columns*``);
    - C·Bᵀ shared through XLA (``shared_scores``) only where a group has more than one head to share it: with one
      head per group (B16 L512 H8 G8, ``...-ssd-other-b``) it cost 0.288 against 0.253 ms forward+backward;
    - the state passes in two levels (``two_level_states``) where they do not get whole-head tiles (batch x heads
      under STATE_PASS_PROGRAMS_PER_SM x ``sm_count``) and L >= TWO_LEVEL_MIN_L, over segments of KEEP_EVERY
      positions, LONG_SEGMENT from LONG_SEGMENT_MIN_L (the kept states' interval too). On an H100
      (``benchmarks/kernels/h100-2026-11-25-ssd-two-level-*``, ms forward / forward+backward, one level against
      two at 1024 / 2048): B1 L16384 H24 0.557 / 1.850 against 0.274 / 1.258 and 0.309 / 1.346, B1 L65536 H8
      1.706 / 4.765 against 0.463 / 2.136 and 0.401 / 1.970, B1 L131072 H24 4.09 / 14.66 against 2.00 / 10.02 and
      1.89 / 9.83, B1 L65536 H128 5.07 / 25.50 against 4.98 / 24.65 at 1024; neutral at B2 L8192 H32 N256
      (0.641 / 3.023 against 0.634 / 3.018) and 130m (1.204 against 1.214 forward+backward), slower with whole-head
      tiles (B4 L16384 H64: 2.53 / 15.17 against 3.01 / 16.11);
    - where the state passes are two-level, the forward's outputs from one fused walk per segment (``fused_segments``)
      up to N = WIDE_TILE_MAX_DSTATE, like the fused forward, and with it two levels from L = FUSED_SEGMENTS_MIN_L
      where the forward is split (too few programs for the fused forward, or L past its limit). On an H100
      (``benchmarks/kernels/h100-2026-11-27-ssd-fused-segments-*``, ms forward, block-state pass + output pass
      against fused segments on 64 head dims at 4 warps) B1 L65536 H128 4.87 against 3.50 (32 or 8 warps: 4.93,
      6.15), B1 L16384 H24 0.264 against 0.220, B1 L131072 H24 1.906 against 1.367; B2 L8192 H32, one-level before,
      0.404 / 1.629 forward / forward+backward against 0.270 / 1.534 (segments of 512: 0.284 / 1.543); at N 256
      (B2 L8192 H32 G4) 0.628 one-level against 0.857 and 1.026 on 32 and 16 head dims (64 spill);
    - with whole-head tiles too, the forward alone two-level with fused segments (``two_level_backward`` off), where
      the forward is split and N <= WIDE_TILE_MAX_DSTATE. At B4 L16384 H64 G8 on an H100 the forward took 2.21
      against 2.47 ms one-level, but with the two-level backward 12.83 against 12.59 ms forward+backward
      (``...-fused-segments-whole``). With the backward one-level, on an H200
      (``benchmarks/kernels/h200-2026-11-27-ssd-forward-two-level-whole.txt``, ms forward / forward+backward,
      one-level against this): B4 L16384 H64 G8 2.206 / 12.323 against 2.103 / 11.438, B2 L16384 H128 1.955 /
      11.061 against 1.859 / 10.780;
    - where the fused forward has at most FEW_PROGRAMS_PER_SM x ``sm_count`` programs (so the split forward's
      one-level state pass, four 16-dim tiles per head, leaves SMs idle), two levels with fused segments from L =
      SHORT_SEGMENTS_MIN_L up to TWO_LEVEL_MIN_L, over segments of L / SEGMENTS_PER_WALK (at least SHORT_SEGMENT):
      each segment's walk is then 1/16 of the sequence, and batch x heads x 16 programs walk them. On an H200
      (``benchmarks/kernels/h200-2026-11-27-ssd-short-segments*``, ms forward / forward+backward, this rule
      against one level, and segments of 1024 at L 8192): B1 L4096 H24 0.076 / 0.358 against 0.144 / 0.467, B2
      L8192 H8 0.087 / 0.434 against 0.117 / 0.491, B1 L8192 H24 0.127 / 0.611 against 0.133 / 0.640, B1 L2048 H24
      0.064 / 0.215 against 0.079 / 0.236, B1 L4096 H8 P128 N64 G2 0.075 / 0.229 against 0.098 / 0.328, B2 L2048 H8
      0.063 / 0.203 against 0.108 / 0.198. At L 1024 (B1 H8) the forward+backward moved both ways between two runs
      (0.090 against 0.092, then 0.201 against 0.154: the launches of the two-level backward at 0.1 ms), hence
      L >= 2048; with more programs, short segments and a two-level backward lost (B4 L1024 H24, 96 programs: 0.073
      / 0.352 against 0.077 / 0.329) or did nothing (B16 L512 H8, 128: 0.057 / 0.237 against 0.065 / 0.230);
    - where the fused forward has more programs than that but fewer than ``sm_count`` (split, one-level before), the
      forward two-level with fused segments of PARTIAL_WAVE_SEGMENT from L = SHORT_SEGMENTS_MIN_L up to
      FUSED_SEGMENTS_MIN_L, the backward one-level (two-level it lost: B4 L4096 H32 N64 G2, 128 programs, 1.365
      against 1.409 ms forward+backward on an H200, ``...-short-segments-n64``). On an H100
      (``benchmarks/kernels/h100-2026-11-27-ssd-short-segments-between``, one level against segments of 512 /
      256): B2 L4096 H32 0.209 / 0.820 against 0.151 / 0.780 and 0.177 / 0.802, B2 L4096 H48 0.265 / 1.124 against
      0.205 / 1.097 and 0.251 / 1.146, B2 L2048 H32 P128 0.213 / 0.850 against 0.151 / 0.795 and 0.173 / 0.824, B4
      L4096 H32 N64 G2 0.270 / 1.387 against 0.231 / 1.370 and 0.266 / 1.387, B4 L2048 H24 0.141 / 0.589 against
      0.122 / 0.597 and 0.128 / 0.594;
    - past N = WIDE_TILE_MAX_DSTATE no fused forward and the sequential passes on 16 head dims: their float32
      (head dims, N) state with the (T, N) B and C tiles outgrows the registers. Compiled for sm_90 at N 256
      (``benchmarks/kernels/sass/ssd-sm90-2026-11-25-dstate.txt``), bytes spilled a thread: the fused forward
      888-1008 (468-528 on 32 head dims), ``ssd_bwd_dstates`` on 64 dims 628 (24 on 32, none on 16). The two-level
      and rebuild kernels stay on 64 dims although they spill 328-372 bytes there, and dB/dC take a group's heads in
      one program (``bwd_head_splits`` 1: no float32 partials for XLA to sum): on an H100
      (``benchmarks/kernels/h100-2026-11-26b-ssd-n256-*``, ms forward / forward+backward, both changes against 32
      dims and 4 splits) B1 L16384 H24 0.451 / 1.620 against 0.512 / 1.889, B2 L8192 H32 G4 0.629 / 2.243 against
      0.625 / 2.630, B8 L2048 H24 0.419 / 1.554 against 0.422 / 1.665;
    - up to N = WIDE_TILE_MAX_DSTATE too, dB/dC take a group's heads in one program where batch x blocks x groups
      alone gives ONE_DBC_PROGRAM_PER_SM x ``sm_count`` programs (4 splits below that, not measured against one):
      on an H100 (``benchmarks/kernels/h100-2026-11-26e-ssd-head-splits``, ``ssd_bwd_dbc`` us, 4 splits against
      1) 130m 210 against 173 (256 programs), 2.7b 304 against 281 (128), B1 L65536 H128 3642 against 3524 (1024),
      and XLA's 28 us sum of the float32 partials at 130m gone;
    - the backward's decay gradient from row sums (``bwd_rowwise_dcs``) everywhere: on an H100
      (``benchmarks/kernels/h100x2-2026-11-25-ssd-bwd-candidates.md``) ``ssd_bwd_dx`` took 480 against 508 us at
      130m and 817 against 839 at 2.7b, and compiled for sm_90 it ran 10-13% fewer instructions at every shape tried
      (N 64-256, G 1-8, L 512-131072) with no spills and no more registers;
    - the backward's per-head kernel on Mosaic GPU (``bwd_dx_mosaic``) on a GPU with Hopper's ``wgmma`` (``wgmma``),
      for the shapes it covers (``kernel_bwd_mosaic.mosaic_dx_supported``: 16-bit inputs, L, P and N multiples of
      64, no seq_idx; the Triton kernel elsewhere). On an H100 (``benchmarks/kernels/h100-2026-11-27-ssd-mosaic-dx*``,
      ms forward+backward, Triton against Mosaic) 130m 1.101 against 0.856, B1 L65536 H128 22.589 against 18.240
      (``...-final``); with an earlier version B4 L16384 H64 G8 12.245 against 9.417, 2.7b 1.869 against 1.473, N 256
      (B2 L8192 H32 G4) 2.223 against 1.948, N 64 1.365 against 1.076, P 128 0.800 against 0.660, B16 L512 H8 0.248
      against 0.213;
    - the backward's dB/dC kernel on Mosaic GPU too (``bwd_dbc_mosaic``, on 128 of N's columns a program) on a GPU
      with ``wgmma``, up to N = WIDE_TILE_MAX_DSTATE and P = MOSAIC_DBC_MAX_HEADDIM, for the shapes it covers
      (``kernel_bwd_dbc_mosaic.mosaic_dbc_supported``, as the per-head kernel's). On an H100
      (``benchmarks/kernels/h100-2026-11-28-ssd-mosaic-dbc-verify*``, ms forward+backward, Triton dB/dC against
      Mosaic, and Mosaic on 64 columns): 130m 0.855 against 0.821 (0.903), B1 L65536 H128 18.269 against 17.283
      (19.342), 2.7b 1.425 against 1.385 (1.490), B4 L16384 H64 G8 9.231 against 8.779 (9.503); ``...-other``:
      B16 L512 H8 0.214 against 0.212, the same with G8 0.274 against 0.256, B4 L4096 H32 N64 G2 1.069 against
      0.903, B1 L16384 H24 0.904 against 0.879, B1 L131072 H24 6.913 against 6.593. It lost where a program loops
      over more tiles: at N 256 (B2 L8192 H32 G4, two or four column tiles) 1.929 against 1.990 (2.249), at P 128
      (B2 L2048 H32, two 64-dim parts a head) 0.643 against 0.668;
    - the forward's fused walks on Mosaic GPU (``fwd_mosaic``) on a GPU with ``wgmma``, for 16-bit inputs with L, P
      and N in 64s (``kernel_fwd_mosaic.mosaic_walk_supported`` checks the rest at the call: no seq_idx), and with
      them the rules above for fused walks at N 256 too (whole where their programs fill the GPU, per segment where
      the forward is split; the backward one-level there). On an H100
      (``benchmarks/kernels/h100-2026-11-28-ssd-mosaic-walk*``, ms forward / forward+backward, Mosaic against the
      Triton forward): 130m 0.179 / 0.812 against 0.185 / 0.858, 2.7b 0.253 / 1.240 against 0.347 / 1.379, B1
      L16384 H24 0.200 / 0.815 against 0.224 / 0.874, B4 L4096 H32 N64 G2 0.192 / 0.875 against 0.240 / 0.933, B1
      L131072 H24 1.398 / 6.535 against 1.370 / 6.701; at N 256 B8 L2048 H24 0.351 / 1.437 (whole walks) against
      0.436 / 1.530 (split), B2 L8192 H32 G4 0.467 / 1.903 (segments of 1024) against 0.595 / 2.042 (Triton
      segments) and 0.629 / 1.950 (split, one-level, ``...-walk-first-n256``);
    - the sequential state passes on Mosaic GPU (``states_mosaic``: the forward's segment states and the backward's
      rebuild, the backward's state gradients one- or two-level) where the forward's walk is (the same cover). On an
      H200 (``benchmarks/kernels/h200-2026-11-28-ssd-mosaic-states*``, ms forward+backward, Triton passes against
      Mosaic) 130m 0.736 against 0.633, B1 L65536 H128 14.965 against 13.903, 2.7b 1.121 against 1.022, B1 L16384
      H24 0.724 against 0.689 (``...-first``); B2 L8192 H32 G4 N256 1.727 against 1.618, B4 L16384 H64 G8 7.531
      against 7.205, B1 L131072 H24 5.654 against 5.419, B4 L4096 H32 N64 G2 0.784 against 0.685, B2 L2048 H32
      P128 0.598 against 0.488, B8 L2048 H24 N256 1.294 against 1.174 (``...-other``): faster at every shape run;
    - with them, the backward's state gradients one-level (``two_level_backward`` off) where batch x heads x 64-dim
      head parts give MOSAIC_ONE_LEVEL_PROGRAMS_PER_SM x ``sm_count`` programs: one Mosaic program a head then walks
      the whole sequence near the copy bandwidth, and the two-level pass's extra read of dout, z and C is the loss.
      On an H200 (``benchmarks/kernels/h200-2026-11-29c-ssd-one-level-*``, ms forward+backward, two-level against
      one-level): B1 L65536 H128 (128 programs) 13.574 against 12.949 (``...-long-profile``; 12.739 in a later
      call, mamba-ssm 22.133 there), B8 L16384 H24 (192) 5.685 against 5.055 (``...-other``);
    - the forward's Mosaic walk on one pipeline stage (``walk_stages``) where that lets two of its programs share an
      SM and the rounds of programs are then fewer, counting each paired program PAIRED_WALK_SLOWDOWN times as long
      as alone, and past N = WIDE_TILE_MAX_DSTATE. On an H200 (``benchmarks/kernels/h200-2026-11-28-ssd-walk-new``,
      ms forward, two stages against one): 130m (192 programs) 0.169 against 0.156, B1 L65536 H128 (4096, per
      segment) 3.047 against 2.775, 2.7b (320) 0.247 against 0.287; the slowdown is 130m's ratio (0.923 x 2 rounds),
      which puts the other two at 0.925 and 1.23. N 256 (one program an SM either way): B2 L8192 H32 G4 0.441
      against 0.421, B8 L2048 H24 0.360 against 0.321;
    - past N = WIDE_TILE_MAX_DSTATE (N 256), the walk's state in halves of N on WALK_WARPGROUPS warpgroups, each
      with its halves of B and C two blocks ahead (``fwd_walk_warpgroups``, ``kernel_fwd_mosaic_halves``); where a
      walk program may have one warpgroup (``walk_warpgroups``), its B and C in WALK_PIECES pieces of N's columns
      by its hand-made loop instead (``fwd_walk_pieces``, ``kernel_fwd_mosaic_pieces``). On an H200
      (``benchmarks/kernels/h200-2026-11-29b-ssd-walk-halves-verify`` and ``-more``, ms forward /
      forward+backward, halves against two pieces, mamba-ssm in the same run): B2 L8192 H32 G4 0.316 / 1.464
      against 0.415 / 1.722 (mamba-ssm 0.699 / 3.894), B8 L2048 H24 0.219 / 1.094 against 0.281 / 1.148, B1
      L16384 H24 0.252 / 1.420 against 0.316 / 1.511, B4 L4096 H64 G8 0.418 / 3.554 against 0.534 / 3.554, B16
      L1024 H16 0.123 / 0.695 against 0.165 / 0.762. At N 128 halves lost (``...-halves-n128``: 130m 0.196
      against 0.147 forward, 2.7b 0.291 against 0.233, the long shape 3.462 against 2.684); two pieces had gained
      4-9% over one stage at N 256 and lost at N 128 (``h200-2026-11-28d-ssd-walk-pieces-*``)."""
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
