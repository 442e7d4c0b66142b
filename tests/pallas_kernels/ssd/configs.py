"""The SsdConfig tilings the SSD tests run, by name: the interpret-mode oracle cases (test_kernels.py), the dispatch
and lowering tests, and the compiled cases on a GPU (tests/pallas_kernels/test_ssd_pallas_gpu.py)."""

import dataclasses

from pallas_kernels.ssd.config import SsdConfig


def split(**tiling) -> SsdConfig:
    """The split forward (state pass + block-parallel output pass) whatever L; the default fuses short ones."""
    return SsdConfig(fused_forward_max_l=0, **tiling)


def kept(every: int, **tiling) -> SsdConfig:
    """Blocks of 16 positions, the forward keeping the state every ``every`` positions for the backward."""
    return SsdConfig(block_l=16, checkpoint_every=every, **tiling)


def two_level(**tiling) -> SsdConfig:
    """The split forward with both state passes in two levels over segments of 3 blocks of 16."""
    return split(block_l=16, checkpoint_every=48, two_level_states=True, **tiling)


def two_level_keep_all(**tiling) -> SsdConfig:
    """Both state passes in two levels over segments of 3 blocks of 16, every block's state kept for the backward."""
    return SsdConfig(block_l=16, state_segment=48, two_level_states=True, **tiling)


BWD_HEADDIM_SPLIT = SsdConfig(block_l=16, block_p=16, bwd_block_p=16)
OWN_SCORES_FUSED = SsdConfig(block_l=16, bwd_block_p=16, shared_scores=False)
OWN_SCORES_SPLIT = split(block_l=32, shared_scores=False)
OWN_SCORES_SHORT_BLOCKS = split(block_l=16, shared_scores=False)  # ... in blocks of 16
OWN_SCORES_BWD_SPLIT = split(block_l=32, bwd_block_p=16, shared_scores=False)  # ... the backward's heads in parts of 16
STATE_COLUMNS_SPLIT = split(block_l=16, state_block_n=16)
TWO_LEVEL_ALL_SPLIT = two_level_keep_all(fused_forward_max_l=0, rebuild_block_p=16)
TWO_LEVEL_ALL_SHORT = two_level_keep_all(fused_forward_max_l=0)  # 3 blocks: one segment, so one level
KEPT_COLUMNS_SPLIT = kept(32, fused_forward_max_l=0, state_block_n=16)  # the rebuild too, on 2 column blocks of N 24
FUSED_SEGMENTS_KEPT = two_level(block_p=16, rebuild_block_p=16, fused_segments=True)
FUSED_SEGMENTS_ALL = two_level_keep_all(fused_forward_max_l=0, shared_scores=False, fused_segments=True)
FUSED_SEGMENTS_SHORT = split(block_l=16, state_segment=32, two_level_states=True, fused_segments=True)
FORWARD_TWO_LEVEL = dict(fused_segments=True, two_level_backward=False)  # the backward's state gradients one-level
FORWARD_TWO_LEVEL_KEPT = two_level(block_p=16, **FORWARD_TWO_LEVEL)
FORWARD_TWO_LEVEL_ALL = two_level_keep_all(fused_forward_max_l=0, **FORWARD_TWO_LEVEL)
ROWWISE = dict(bwd_rowwise_dcs=True)  # the backward's d cs from row sums (no dM, no (T, T) sums)
OWN_SCORES_ROWWISE = split(block_l=16, shared_scores=False, **ROWWISE)
ONE_DBC_PROGRAM = split(block_l=32, bwd_head_splits=1)  # dB and dC of a group's heads summed in one program
MOSAIC_DX = SsdConfig(bwd_dx_mosaic=True)  # the backward's per-head kernel on Mosaic GPU (blocks of 64 positions)
MOSAIC = SsdConfig(bwd_dx_mosaic=True, bwd_dbc_mosaic=True)  # ... and its dB/dC kernel
MOSAIC_64_COLUMNS = dataclasses.replace(MOSAIC, bwd_dbc_columns=64)  # ... on 64 of N's columns a program
# ... and the forward's fused walk and the sequential state passes (forward and backward) on Mosaic GPU
MOSAIC_FORWARD = dataclasses.replace(MOSAIC, fwd_mosaic=True, states_mosaic=True)
MOSAIC_FORWARD_ONE_STAGE = dataclasses.replace(MOSAIC_FORWARD, fwd_walk_stages=1)  # one block's inputs at a time
# ... the walk once per segment of 2 blocks (the two-level state pass's), storing every block's state, or none where
# the forward keeps float32 states every 2 blocks
MOSAIC_SEGMENTS = dataclasses.replace(
    MOSAIC_FORWARD, fused_forward_max_l=0, two_level_states=True, state_segment=128, fused_segments=True
)
MOSAIC_SEGMENTS_KEPT = dataclasses.replace(MOSAIC_SEGMENTS, checkpoint_every=128, fwd_walk_stages=1)
# ... a whole walk keeping float32 states every 2 blocks: per segment of them, as MOSAIC_SEGMENTS_KEPT's forward
MOSAIC_FORWARD_KEPT = dataclasses.replace(MOSAIC_FORWARD, checkpoint_every=128)
# ... the walk's B and C in two pieces of N's columns, by its hand-made loop (whole, per segment)
MOSAIC_FORWARD_PIECES = dataclasses.replace(MOSAIC_FORWARD, fwd_walk_pieces=2)
MOSAIC_SEGMENTS_PIECES = dataclasses.replace(MOSAIC_SEGMENTS, fwd_walk_pieces=2)
# ... the walk's state in halves of N on two warpgroups, B and C two blocks ahead (whole, per segment)
MOSAIC_FORWARD_HALVES = dataclasses.replace(MOSAIC_FORWARD, fwd_walk_warpgroups=2)
MOSAIC_SEGMENTS_HALVES = dataclasses.replace(MOSAIC_SEGMENTS, fwd_walk_warpgroups=2)
