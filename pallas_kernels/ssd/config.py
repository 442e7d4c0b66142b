"""Tiling of the Pallas SSD kernels: how long a block of time a program takes per step, how many head dims it owns.

Time is cut into blocks of ``block_l`` positions. Sequential passes (one program per batch row, head,
``state_block_p`` head dims and ``state_block_n`` of the state's N columns) walk the blocks carrying that tile of
the float32 state, or of its gradient in the backward, and store it per block; everything else runs block-parallel
as the quadratic (attention-like) SSD form on tensor cores: the forward output with one program per block, head and
``block_p`` head dims (C·Bᵀ per group: see ``shared_scores`` below), or, for L <= ``fused_forward_max_l``, one fused
sequential forward per batch row, head and ``block_p`` head dims that needs no stored states; the backward's
per-head gradients with one program per block, head and ``bwd_block_p`` head dims (their ddt, dA and d dt_bias
partials, linear in the head dims, summed by XLA; ``bwd_rowwise_dcs`` takes its decay gradient from (T, P) row sums
instead of the (T, T) dM's row and column sums); dB and dC with ``bwd_head_splits`` programs per block and group,
each looping over its share of the group's heads so that they sum in registers. ``block_l`` is the kernels' own
chunk: it changes rounding only, never the result (mamba-ssm's ``chunk_size`` is accepted and checked but does not
tile these kernels).

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
Mosaic GPU backend (``mosaic_gpu.backward_dx``) where that kernel covers the shape, else on Triton as every other
kernel.
With ``bwd_dbc_mosaic`` (``default_config`` sets it on Hopper GPUs up to N 128 and P 64) the dB/dC kernel does
too (``mosaic_gpu.backward_dbc``), on ``bwd_dbc_columns`` of N's columns a program. With ``fwd_mosaic``
(``default_config`` sets it on Hopper GPUs) the forward's fused walks, whole (``fused_forward_max_l``) or per segment
(``fused_segments``), run on Mosaic GPU (``mosaic_gpu.forward``) where it covers the shape; its state does not spill
at N 256, so there the fused walks are the default too. With ``states_mosaic`` (set with it) so do the sequential
state passes, forward and backward, one- or two-level (``mosaic_gpu.states``; the walks over segments stay Triton).
``fwd_walk_stages`` is the Mosaic walk's pipeline depth: one lets two of its programs share an SM up to N 192.
``fwd_walk_pieces`` > 1 replaces that pipeline by a hand-made loop that keeps two blocks of x, z and the decay
vectors in flight and one of B and C, in pieces of N's columns, each refilled once its products are done
(``mosaic_gpu.forward_pieces``): at N 256 two stages of all four take 211 KB and ran slower than one.
``fwd_walk_warpgroups`` 2 holds the walk's state in halves of N on two warpgroups of a program, each loading its
halves of B and C two blocks ahead (``mosaic_gpu.forward_halves``): at N 256 one warpgroup's whole state spills.

With ``shared_scores`` (the default) the forward's output and the backward's per-head kernel read each block's C·Bᵀ
(T, T), float32, computed once per group by XLA (``triton.block.block_scores``), instead of each program (head, head
dims) recomputing it (``docs/kernels.md#ssd-kernels``); ``default_config`` turns it off where each group has one head.
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
    state_block_p: int = 16  # sequential state passes (forward states, backward state gradients)
    state_block_n: int = 0  # sequential state passes: state columns (of N) per program; 0: all
    rebuild_block_p: int = 64  # the backward's rebuild of the block states from the kept ones: head dims per program
    state_num_warps: int = 4
    bwd_num_warps: int = 8  # backward per-head kernel (dx, dz, ddt, dA, dD, d dt_bias); whole 64-dim heads spill at 4
    bwd_block_p: int = MAX_HEADDIM  # backward per-head kernel: head dims per program (clipped to headdim)
    bwd_rowwise_dcs: bool = False  # backward per-head kernel: d cs from row sums only (no (T, T) dM, no column sums)
    bwd_head_splits: int = 4  # backward dB/dC kernel: programs sharing a group's heads (at most; rounded to a divisor)
    dbc_num_warps: int = 8
    bwd_num_stages: int = 2
    checkpoint_every: int = 0  # positions between the states kept for the backward (a multiple of block_l; 0: all)
    shared_scores: bool = True  # C·Bᵀ of each block and group once (XLA), read by the per-head kernels
    two_level_states: bool = False  # state passes segment-parallel plus a walk over segments
    state_segment: int = 1024  # two-level passes, all states kept: positions per segment (a multiple of block_l)
    fused_segments: bool = False  # two-level forward: outputs by a fused walk per segment (no block-state pass)
    two_level_backward: bool = True  # with two_level_states: the backward's state-gradient pass in two levels too
    bwd_dx_mosaic: bool = False  # backward per-head kernel on Mosaic GPU (``mosaic_gpu.backward_dx``) where it covers
    bwd_dbc_mosaic: bool = False  # backward dB/dC kernel on Mosaic GPU (``mosaic_gpu.backward_dbc``) where it covers
    bwd_dbc_columns: int = 128  # ... N's columns per program there (64 or 128: its two float32 accumulators' width)
    fwd_mosaic: bool = False  # the forward's fused walks (whole or per segment) on Mosaic GPU (``mosaic_gpu.forward``)
    states_mosaic: bool = False  # the sequential state passes (both ways) on Mosaic GPU (``mosaic_gpu.states``)
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
        n = self.state_block_n
        if not isinstance(n, int) or (n != 0 and (n < MIN_DOT or n != next_pow2(n))):
            raise ValueError(f"SsdConfig.state_block_n must be 0 or a power of two >= {MIN_DOT}, got {n!r}")
        if self.fwd_walk_pieces not in (1, 2, 4):
            raise ValueError(f"SsdConfig.fwd_walk_pieces must be 1, 2 or 4, got {self.fwd_walk_pieces!r}")
        if self.fwd_walk_warpgroups not in (1, 2):
            raise ValueError(f"SsdConfig.fwd_walk_warpgroups must be 1 or 2, got {self.fwd_walk_warpgroups!r}")
        if self.bwd_dbc_columns not in (64, 128):
            raise ValueError(f"SsdConfig.bwd_dbc_columns must be 64 or 128, got {self.bwd_dbc_columns!r}")
        value = self.fused_forward_max_l
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"SsdConfig.fused_forward_max_l must be an int >= 0, got {value!r}")
