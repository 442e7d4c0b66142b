"""``default_config`` and its helpers (pallas_kernels/ssd/heuristics.py): which tilings and kernels, Triton or Mosaic
GPU, each shape and GPU get. Rules on shapes alone: nothing is compiled or run (a refused config raises before any
work). The measurements behind each rule are in docs/kernels.md#ssd-default-config."""

import jax.numpy as jnp
import pytest

from pallas_kernels import mamba_chunk_scan_combined
from pallas_kernels.ssd.config import SsdConfig
from tests.pallas_kernels.test_ssd_reference import make_inputs


def test_keeping_states_every_matches_the_two_level_segments():
    from pallas_kernels.ssd.heuristics import default_config, keeping_states_every

    two_level = default_config(1, 65536, 24, 64, 128, 2)
    assert two_level.two_level_states
    assert keeping_states_every(two_level, 512).state_segment == keeping_states_every(two_level, 512).checkpoint_every
    assert keeping_states_every(two_level, 0).state_segment == two_level.state_segment  # every block's: segments kept
    one_level = default_config(8, 2048, 24, 64, 128, 2)
    assert keeping_states_every(one_level, 1024).state_segment == one_level.state_segment


def test_default_config_keeps_every_block_state_only_while_they_are_small():
    from pallas_kernels.ssd.heuristics import KEEP_EVERY, LONG_SEGMENT, default_config

    assert default_config(8, 2048, 24, 64, 128, 2).checkpoint_every == 0  # mamba2-130m layer: 100 MB
    assert default_config(4, 2048, 80, 64, 128, 2).checkpoint_every == 0  # 2.7b layer: 168 MB
    assert default_config(4, 16384, 64, 64, 128, 2).checkpoint_every == KEEP_EVERY  # 1 GB
    assert default_config(1, 65536, 128, 64, 128, 2).checkpoint_every == LONG_SEGMENT  # 2.1 GB, two-level segments
    assert default_config(1, 65536, 24, 64, 128, 2).checkpoint_every == LONG_SEGMENT  # 130m at L 65536: 400 MB


def test_default_config_fuses_the_forward_only_where_its_programs_fill_the_gpu():
    from pallas_kernels.ssd.heuristics import default_config

    assert default_config(8, 2048, 24, 64, 128, 2).fused_forward_max_l > 0  # 192 programs on 132 SMs
    assert default_config(4, 2048, 80, 64, 128, 2).fused_forward_max_l > 0  # 320
    assert default_config(2, 8192, 32, 64, 256, 2).fused_forward_max_l == 0  # 64
    assert default_config(16, 512, 8, 64, 64, 2).fused_forward_max_l == 0  # 128
    assert default_config(16, 512, 8, 64, 64, 2, sm_count=100).fused_forward_max_l > 0  # a smaller GPU
    assert default_config(1, 2048, 4, 128, 64, 2, sm_count=8).fused_forward_max_l > 0  # 2 tiles of 64 head dims


def test_default_config_splits_the_backward_head_dims_up_to_n_128():
    from pallas_kernels.ssd.heuristics import default_config

    for dstate in (64, 128):
        config = default_config(8, 2048, 24, 64, dstate, 2)
        assert (config.bwd_block_p, config.bwd_num_warps) == (32, 4)
    config = default_config(2, 8192, 32, 64, 256, 2)
    assert (config.bwd_block_p, config.bwd_num_warps) == (SsdConfig().bwd_block_p, SsdConfig().bwd_num_warps)


def test_default_config_takes_the_rowwise_decay_gradient_at_every_shape():
    from pallas_kernels.ssd.heuristics import default_config

    shapes = [(8, 2048, 24, 64, 128), (1, 65536, 128, 64, 128), (2, 8192, 32, 64, 256), (16, 512, 8, 64, 64)]
    assert all(default_config(*shape, 2).bwd_rowwise_dcs for shape in shapes)
    assert not SsdConfig().bwd_rowwise_dcs  # the tile sums stay reachable (and tested) by an explicit SsdConfig


def test_default_config_state_passes_take_wider_tiles_only_where_enough_programs_remain():
    from pallas_kernels.ssd.heuristics import default_config

    assert default_config(4, 2048, 80, 64, 128, 2).state_block_p == 64  # 2.7b: 320 programs
    assert default_config(4, 4096, 64, 64, 128, 2).state_block_p == 64  # 256
    assert default_config(1, 65536, 128, 64, 128, 2).state_block_p == 32  # 256 programs (128 at 64), a long walk
    assert default_config(8, 2048, 24, 64, 128, 2).state_block_p == 16  # 130m: 192 at 64; L too short for 32
    assert default_config(16, 512, 8, 64, 64, 2).state_block_p == 16
    assert default_config(2, 8192, 32, 64, 256, 2).state_block_p == 16  # 128 at 32
    assert default_config(1, 65536, 2, 64, 128, 2).state_block_p == 16  # too few at any tile: the narrowest


def test_default_config_takes_two_level_state_passes_for_long_walks_short_of_programs():
    """Measured on an H100 (docs/kernels.md#ssd-default-config)."""
    from pallas_kernels.ssd.heuristics import KEEP_EVERY, LONG_SEGMENT, default_config

    def two_level(*shape):
        config = default_config(*shape)
        return config.state_segment if config.two_level_states else None

    assert two_level(1, 16384, 24, 64, 128, 2) == KEEP_EVERY  # 24 heads: 0.557 -> 0.274 ms forward
    assert two_level(1, 65536, 8, 64, 128, 2) == LONG_SEGMENT  # 1.706 -> 0.401 ms forward
    assert two_level(1, 65536, 128, 64, 128, 2) == LONG_SEGMENT  # 128 whole-head programs
    whole = default_config(4, 16384, 64, 64, 128, 2)  # 256 whole-head programs: a two-level backward was slower
    assert whole.two_level_states and whole.fused_segments and not whole.two_level_backward
    assert not default_config(4, 16384, 64, 64, 256, 2, wgmma=False).two_level_states  # at N 256 only Mosaic fuses
    assert not default_config(2, 8192, 32, 64, 256, 2, wgmma=False).two_level_states  # Triton at N 256: no gain
    assert two_level(8, 2048, 24, 64, 128, 2) is None  # 130m
    config = default_config(1, 131072, 24, 64, 128, 2)
    assert config.checkpoint_every == config.state_segment == LONG_SEGMENT  # the kept states are the segments'


def test_default_config_walks_the_backward_state_gradients_one_level_where_mosaic_heads_fill_the_gpu():
    """Measured on an H200 (ms forward+backward, two-level against one-level; docs/kernels.md#ssd-default-config): B1
    L65536 H128 13.574 against 12.949, B8 L16384 H24 5.685 against 5.055. One Mosaic state-pass program per 64-dim head
    then walks at the copy bandwidth; with fewer heads the two levels stay."""
    from pallas_kernels.ssd.heuristics import default_config

    for shape in ((1, 65536, 128, 64, 128), (8, 16384, 24, 64, 128), (2, 16384, 64, 64, 128), (1, 32768, 60, 128, 64)):
        config = default_config(*shape, 2)
        assert config.states_mosaic and config.two_level_states and not config.two_level_backward, shape
    for shape in ((1, 131072, 24, 64, 128), (2, 8192, 32, 64, 128), (1, 16384, 24, 64, 128), (1, 65536, 96, 64, 128)):
        assert default_config(*shape, 2).two_level_backward, shape  # 24-96 heads: short of 0.9 x 132
    assert default_config(1, 65536, 128, 64, 128, 2, sm_count=160).two_level_backward  # a larger GPU
    assert default_config(1, 65536, 128, 64, 128, 2, wgmma=False).two_level_backward  # the Triton passes


def test_default_config_fuses_the_two_level_forward_per_segment_up_to_n_128():
    """Measured on an H100 (docs/kernels.md#ssd-default-config): where the state passes are two-level, one fused walk
    per segment in place of the block-state pass and the output pass (forward 4.87 -> 3.50 ms at B1 L65536 H128), and
    with it two levels from L 8192 where the forward is split (B2 L8192 H32: 0.404 -> 0.270 ms); not past N 128, where
    the fused tiles spill, nor where the passes stay one-level."""
    from pallas_kernels.ssd.heuristics import default_config

    assert default_config(1, 65536, 128, 64, 128, 2).fused_segments
    assert default_config(1, 16384, 24, 64, 128, 2).fused_segments
    split_8192 = default_config(2, 8192, 32, 64, 128, 2)  # 64 programs: a split forward, one-level before
    assert split_8192.two_level_states and split_8192.fused_segments and split_8192.state_segment == 1024
    assert not default_config(8, 8192, 24, 64, 128, 2).two_level_states  # 192 programs: the fused forward
    assert default_config(8, 12288, 24, 64, 128, 2).fused_segments  # ... past its L
    assert not default_config(4, 1024, 32, 64, 128, 2).two_level_states  # a walk of 16 blocks
    assert not default_config(1, 16384, 24, 64, 256, 2, wgmma=False).fused_segments  # two-level, but N 256 on Triton
    assert default_config(4, 16384, 64, 64, 128, 2).fused_segments  # whole-head programs: the forward only
    assert default_config(1, 16384, 24, 64, 128, 2).two_level_backward  # few programs: both passes
    assert not default_config(8, 2048, 24, 64, 128, 2).fused_segments  # 130m: the fused forward


def test_default_config_cuts_short_walks_into_segments_where_the_fused_forward_has_few_programs():
    """Measured on an H200 (docs/kernels.md#ssd-default-config): with at most a quarter as many fused programs as SMs,
    two levels with fused segments of L / 16 (at least 256) from L 2048 (B1 L4096 H24: 0.144 / 0.467 -> 0.076 / 0.358 ms
    forward / forward+backward); not with more programs (B4 L1024 H24: 96, slower), nor past N 128, nor at L 1024 (the
    forward+backward moved both ways)."""
    from pallas_kernels.ssd.heuristics import KEEP_EVERY, SHORT_SEGMENT, default_config

    def segment(*shape, dstate=128, sm_count=132, wgmma=True):
        config = default_config(*shape, 64, dstate, 2, sm_count, wgmma=wgmma)
        if not config.two_level_states:
            return None
        assert config.fused_segments and config.two_level_backward == (dstate <= 128), shape
        assert config.checkpoint_every == 0, shape
        return config.state_segment

    assert segment(2, 2048, 8) == segment(1, 4096, 24) == SHORT_SEGMENT
    assert segment(1, 8192, 24) == segment(2, 6000, 8) == 512  # L rounded up to a power of two, over 16
    assert segment(1, 16384, 24) == KEEP_EVERY  # from L 16384 the longer walks' rule
    assert segment(2, 8192, 32) == KEEP_EVERY  # 64 programs: segments of 512 did not win there
    assert segment(4, 2048, 24, sm_count=400) == SHORT_SEGMENT  # 96 programs: few on a larger GPU
    assert segment(1, 1024, 8) is None and segment(16, 512, 8) is None
    assert segment(1, 4096, 24, dstate=256, wgmma=False) is None  # the Triton fused tiles spill


def test_default_config_cuts_the_forward_into_segments_of_512_where_the_fused_forward_runs_a_partial_wave():
    """Measured on an H100 (docs/kernels.md#ssd-default-config): with a quarter to all of the SMs' worth of fused
    programs, below L 8192, two levels with fused segments of 512 and the backward one-level (B2 L4096 H32, 64 programs:
    0.209 / 0.820 -> 0.151 / 0.780 ms forward / forward+backward)."""
    from pallas_kernels.ssd.heuristics import KEEP_EVERY, PARTIAL_WAVE_SEGMENT, default_config

    for shape, groups in (((2, 4096, 32, 64, 128), 1), ((4, 2048, 24, 64, 128), 1), ((4, 4096, 32, 64, 64), 2)):
        config = default_config(*shape, 2, ngroups=groups)
        assert config.two_level_states and config.fused_segments and not config.two_level_backward, shape
        assert config.state_segment == PARTIAL_WAVE_SEGMENT and config.checkpoint_every == 0, shape
    assert default_config(2, 2048, 32, 128, 128, 2).state_segment == PARTIAL_WAVE_SEGMENT  # 2 tiles of 64 a head
    long_walk = default_config(2, 8192, 32, 64, 128, 2)  # from L 8192 the longer walks' rule
    assert long_walk.state_segment == KEEP_EVERY and long_walk.two_level_backward
    assert not default_config(4, 1024, 24, 64, 128, 2).two_level_states  # L 1024
    assert not default_config(8, 2048, 24, 64, 128, 2).two_level_states  # 130m: 192 programs, the fused forward
    assert not default_config(2, 4096, 32, 64, 256, 2, wgmma=False).two_level_states  # N 256 on Triton


def test_default_config_keeps_wide_tiles_and_the_fused_forward_to_n_128():
    """Past N 128 they spill on sm_90 (ptxas's report, docs/kernels.md#ssd-default-config), and dB/dC take a group's
    heads whole: the same shapes at N 128 and 256."""
    from pallas_kernels.ssd.heuristics import default_config

    assert default_config(8, 2048, 24, 64, 128, 2).fused_forward_max_l > 0
    assert default_config(8, 2048, 24, 64, 256, 2, wgmma=False).fused_forward_max_l == 0  # (Mosaic: the next test)
    for shape, tile in (((4, 4096, 64, 64), 64), ((1, 65536, 128, 64), 32)):
        assert default_config(*shape, 128, 2).state_block_p == tile
        assert default_config(*shape, 256, 2).state_block_p == SsdConfig().state_block_p == 16
    for shape in ((1, 16384, 24, 64), (1, 65536, 128, 64)):  # two-level state passes: their rebuild on 64 dims
        assert default_config(*shape, 128, 2).rebuild_block_p == SsdConfig().rebuild_block_p == 64
        wide = default_config(*shape, 256, 2)
        assert wide.two_level_states and wide.rebuild_block_p == 64  # spills, yet faster on an H100
    for shape in ((1, 2048, 24, 64), (2, 1024, 8, 64)):  # dB/dC: one program per group past 128 whatever the programs
        assert default_config(*shape, 128, 2).bwd_head_splits == SsdConfig().bwd_head_splits == 4
        assert default_config(*shape, 256, 2).bwd_head_splits == 1


def test_default_config_walks_the_forward_on_mosaic_gpu_where_it_covers_the_shape_n_256_included():
    """Measured on an H100 (ms forward, the Mosaic GPU walk against the Triton forward;
    docs/kernels.md#ssd-default-config): 130m 0.179 against 0.185, 2.7b 0.253 against 0.347, B1 L16384 H24 0.200 against
    0.224, B4 L4096 H32 N64 G2 0.192 against 0.240. Its state does not spill at N 256, so there the fused forward and
    the fused segments run too: B8 L2048 H24 N256 0.351 (whole walks) against 0.436 (split), B2 L8192 H32 G4 N256 0.467
    (segments of 1024, the backward one-level) against 0.595 (Triton segments) and 0.629 (split, one-level)."""
    from pallas_kernels.ssd.heuristics import default_config

    assert default_config(8, 2048, 24, 64, 128, 2).fwd_mosaic
    assert not default_config(8, 2048, 24, 64, 128, 2, wgmma=False).fwd_mosaic
    assert not default_config(8, 2048, 24, 64, 128, 4).fwd_mosaic  # float32: the Triton kernels
    assert not default_config(8, 2000, 24, 64, 128, 2).fwd_mosaic  # a partial last block
    assert not default_config(8, 2048, 24, 48, 128, 2).fwd_mosaic  # head dims not in 64s
    assert default_config(8, 2048, 24, 64, 256, 2).fused_forward_max_l > 0  # 192 programs walk whole
    n256 = default_config(2, 8192, 32, 64, 256, 2, ngroups=4)  # 64 programs: per segment
    assert n256.fused_forward_max_l == 0 and n256.two_level_states and n256.fused_segments
    assert n256.state_segment == 1024 and not n256.two_level_backward
    triton = default_config(2, 8192, 32, 64, 256, 2, ngroups=4, wgmma=False)  # one-level, split
    assert not triton.two_level_states and triton.fused_forward_max_l == 0


def test_default_config_walks_the_state_passes_on_mosaic_gpu_with_the_forward():
    """Measured on an H200 (docs/kernels.md#ssd-default-config): the state passes on Mosaic GPU were faster at all ten
    shapes run; they take the forward walk's cover."""
    from pallas_kernels.ssd.heuristics import default_config

    for shape in [(8, 2048, 24, 64, 128), (1, 65536, 128, 64, 128), (2, 8192, 32, 64, 256), (2, 2048, 32, 128, 128)]:
        assert default_config(*shape, 2).states_mosaic
    for itemsize, wgmma, seqlen, headdim in [(2, False, 2048, 64), (4, True, 2048, 64), (2, True, 2000, 64)]:
        assert not default_config(8, seqlen, 24, headdim, 128, itemsize, wgmma=wgmma).states_mosaic
    assert not default_config(8, 2048, 24, 48, 128, 2).states_mosaic  # head dims not in 64s


def test_default_config_walks_the_forward_on_one_stage_where_two_programs_then_share_an_sm_in_fewer_rounds():
    """Measured on an H200 (docs/kernels.md#ssd-default-config): one stage won at 130m (192 programs, one round paired
    against two alone), B1 L65536 H128 (4096 segment programs) and N 256, lost at 2.7b (320: two paired rounds against
    three alone). Two stages already pair at N 64; one stage cannot pair past N 192."""
    from pallas_kernels.ssd.heuristics import SM_SHARED_BYTES, default_config, walk_shared_bytes

    stages = lambda *shape, groups=1: default_config(*shape, 2, ngroups=groups).fwd_walk_stages  # noqa: E731
    assert stages(8, 2048, 24, 64, 128) == 1
    assert stages(1, 65536, 128, 64, 128) == 1
    assert stages(4, 2048, 80, 64, 128) == 2
    assert stages(2, 8192, 32, 64, 256, groups=4) == stages(8, 2048, 24, 64, 256) == 1
    assert stages(4, 4096, 32, 64, 64, groups=2) == 2
    assert 2 * walk_shared_bytes(64, 2) < SM_SHARED_BYTES < 2 * walk_shared_bytes(128, 2)
    assert 2 * walk_shared_bytes(128, 1) < SM_SHARED_BYTES < 2 * walk_shared_bytes(256, 1)
    assert walk_shared_bytes(256, 2) < SM_SHARED_BYTES  # one program fits at every N the walk covers


def test_default_config_holds_the_walks_state_in_halves_on_two_warpgroups_at_n_256():
    """Measured on an H200 (docs/kernels.md#ssd-default-config): the state in halves on two warpgroups won the forward
    at three N 256 shapes against B and C in two pieces, which stay where a walk program may have one warpgroup (the
    interpreter short of threads); N 192 has no halves of 64-column multiples."""
    from pallas_kernels.ssd.heuristics import PROGRAM_RESERVED_BYTES, SM_SHARED_BYTES, default_config, walk_shared_bytes

    def walk(*shape, groups=1, warpgroups=2):
        config = default_config(*shape, 2, ngroups=groups, walk_warpgroups=warpgroups)
        return config.fwd_walk_warpgroups, config.fwd_walk_pieces

    assert walk(2, 8192, 32, 64, 256, groups=4) == walk(8, 2048, 24, 64, 256) == walk(1, 16384, 24, 64, 256) == (2, 1)
    assert walk(2, 8192, 32, 64, 256, groups=4, warpgroups=1) == walk(8, 2048, 24, 64, 256, warpgroups=1) == (1, 2)
    assert walk(8, 2048, 24, 64, 128) == walk(4, 16384, 64, 64, 128, groups=8) == walk(8, 2048, 24, 64, 192) == (1, 1)
    assert default_config(8, 2048, 24, 64, 256, 2, wgmma=False).fwd_walk_warpgroups == 1  # no Mosaic walk
    # two blocks of x and z beside one of B and C: less than two stages of all four, more than one
    assert walk_shared_bytes(256, 1) < walk_shared_bytes(256, 1, 2) < walk_shared_bytes(256, 2) < SM_SHARED_BYTES
    # the state in halves on two warpgroups: two blocks of B and C, and still one program an SM at N 256
    assert walk_shared_bytes(256, 2) < walk_shared_bytes(256, 1, 1, 2) < SM_SHARED_BYTES - PROGRAM_RESERVED_BYTES


def test_default_config_takes_a_groups_heads_in_one_dbc_program_where_blocks_and_groups_fill_the_gpu():
    """Measured on an H100 (docs/kernels.md#ssd-default-config): one program per block and group beat 4 splits at 256,
    128 and 1024 such programs."""
    from pallas_kernels.ssd.heuristics import default_config

    def splits(batch, seqlen, groups, sm_count=132):
        return default_config(batch, seqlen, 24, 64, 128, 2, sm_count, ngroups=groups).bwd_head_splits

    assert splits(8, 2048, 1) == 1  # 130m: 256 programs
    assert splits(4, 2048, 1) == 1  # 2.7b: 128
    assert splits(1, 65536, 1) == 1  # long: 1024
    assert splits(2, 8192, 4) == 1
    assert splits(1, 2048, 1) == 4  # 32 programs: the splits keep the GPU busy
    assert splits(1, 2048, 4) == 1  # 128 through the groups
    assert splits(4, 2048, 1, sm_count=160) == 4  # the same shape on a larger GPU
    assert splits(2, 2049, 1) == 4  # 66 programs, a partial last block counted


def test_default_config_runs_the_mosaic_gpu_kernels_on_gpus_with_wgmma(rng, monkeypatch):
    """Measured on an H100 (docs/kernels.md#ssd-default-config): both Mosaic GPU kernels up to N 128 and P 64, the
    per-head one beyond. ``wgmma`` is Hopper's alone (compute capability 9.x: not an A100's 8.0, nor a B200's 10.0), and
    the interpreter stands in for an H100. A config that asks for a Mosaic kernel on another GPU is refused."""
    from types import SimpleNamespace

    from pallas_kernels import _triton
    from pallas_kernels.ssd.api import pallas_config
    from pallas_kernels.ssd.heuristics import default_config

    for wgmma in (True, False):
        config = default_config(8, 2048, 24, 64, 128, 2, wgmma=wgmma)
        assert (config.bwd_dx_mosaic, config.bwd_dbc_mosaic) == (wgmma, wgmma)
    interpreted = pallas_config(8, 2048, 24, 64, 128, jnp.bfloat16)  # the interpreter stands in for an H100
    assert interpreted.bwd_dx_mosaic and interpreted.bwd_dbc_mosaic
    # more tiles a program, two column tiles at N 256 or two 64-dim parts a head at P 128: the Triton dB/dC kernel won
    for n256_or_p128 in (default_config(2, 8192, 32, 64, 256, 2, ngroups=4), default_config(2, 2048, 32, 128, 128, 2)):
        assert n256_or_p128.bwd_dx_mosaic and not n256_or_p128.bwd_dbc_mosaic
    arrays, _, _ = make_inputs(rng, 1, 64, 2, 64, 64, 1, jnp.bfloat16)
    monkeypatch.setattr(_triton, "interpret_mode", lambda: False)
    for capability, wgmma in (("9.0", True), ("8.0", False), ("10.0", False), (None, False)):
        monkeypatch.setattr(_triton.jax, "devices", lambda c=capability: [SimpleNamespace(compute_capability=c)])
        assert _triton.gpu_has_wgmma() is wgmma, capability
    # asked for on a GPU without wgmma (8.0 here), the Mosaic kernels are refused before any work
    monkeypatch.setattr(_triton.jax, "devices", lambda: [SimpleNamespace(compute_capability="8.0")])
    for name in ("fwd_mosaic", "states_mosaic", "bwd_dx_mosaic", "bwd_dbc_mosaic"):
        config = SsdConfig(**{name: True})
        with pytest.raises(ValueError, match=f"SsdConfig.{name} needs a GPU with Hopper's wgmma .* has 8.0"):
            mamba_chunk_scan_combined(**arrays, chunk_size=64, impl="pallas", config=config)


def test_default_config_shares_scores_only_where_a_group_has_several_heads():
    """Measured on an H100 (docs/kernels.md#ssd-default-config)."""
    from pallas_kernels.ssd.heuristics import default_config

    assert default_config(8, 2048, 24, 64, 128, 2).shared_scores  # 130m: 24 heads share one group's C·Bᵀ
    assert default_config(4, 4096, 64, 64, 128, 2, ngroups=8).shared_scores  # 8 heads per group
    assert not default_config(16, 512, 8, 64, 64, 2, ngroups=8).shared_scores  # one head per group: nothing shared
