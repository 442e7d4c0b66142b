"""The Pallas SSD kernels in interpret mode (CPU): forward, final state and every gradient against the float64
oracle and the pure-JAX reference, on awkward shapes and tilings, with and without each optional input; refusals.

Interpret mode fills outputs with NaN before the kernel runs, so any element a kernel forgets to write fails."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.tolerances import assert_close, reference_noise_scale
from pallas_kernels import mamba_chunk_scan_combined
from pallas_kernels.ssd.block import SsdDims
from pallas_kernels.ssd.config import SsdConfig
from tests.pallas_kernels.test_ssd_reference import INF, make_inputs, oracle, oracle_with_spread, run_with_vjp

# dA, d dt_bias and dD (float32, one value per head) are sums over batch and L of products whose factors the kernels
# round to bf16/fp16 for the dots; their bound is 3x the dtype's. dA and d dt_bias sum per-position terms that can
# cancel to a small fraction of their size (a bf16 seed: dA 4% of the terms' absolute sum, off by 4.7% relative to
# itself, 1.5% relative to the terms' root-sum-square), so their error is relative to max(|sum|, that spread) (see
# oracle_with_spread); dD sums exact products in float32 and stays relative to itself.
REDUCED_GRADS = ("A", "dt_bias", "D")
REDUCED_GRAD_SCALE = 3.0


def split(**tiling) -> SsdConfig:
    """The split forward (state pass + block-parallel output pass) whatever L; the default fuses short ones."""
    return SsdConfig(fused_forward_max_l=0, **tiling)


def persistent(programs: int, block_l: int, **tiling) -> SsdConfig:
    """The split forward with its output pass as ``programs`` persistent programs."""
    return split(block_l=block_l, persistent_programs=programs, **tiling)


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
PERSISTENT_BOTH = persistent(5, 16, block_p=16, bwd_persistent_programs=5)  # the backward's per-head kernel too
OWN_SCORES_PERSISTENT = persistent(5, 16, shared_scores=False, bwd_persistent_programs=7)
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
OWN_SCORES_PERSISTENT_ROWWISE = persistent(5, 16, shared_scores=False, bwd_persistent_programs=7, **ROWWISE)
ONE_DBC_PROGRAM = split(block_l=32, bwd_head_splits=1)  # dB and dC of a group's heads summed in one program
STATE_CHUNKS = dict(block_l=32, bwd_state_chunk=16, bwd_block_p=16, **ROWWISE)
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
OWN_SCORES_STATE_CHUNKS = split(block_l=32, bwd_state_chunk=16, bwd_block_p=16, shared_scores=False)

CASES = [  # batch, L, H, P, N, G, chunk, dtype, D, z, init, seq_idx, softplus, dt_limit, config
    (2, 1, 4, 16, 16, 1, 64, jnp.float32, "H", True, True, False, True, (0.0, INF), SsdConfig(block_l=16)),
    (1, 100, 4, 20, 12, 2, 64, jnp.float32, "HP", False, False, True, True, (0.0, INF), split(block_l=32)),
    (2, 256, 2, 32, 16, 1, 128, jnp.float32, None, True, True, True, True, (0.01, 0.3), SsdConfig(block_l=64)),
    (1, 1000, 2, 16, 24, 1, 256, jnp.float32, "H", True, True, True, True, (0.0, INF), split()),
    # the sequential passes on 16 of N = 40 state columns per program (3 column blocks, the last one partial)
    (1, 97, 6, 16, 40, 3, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), STATE_COLUMNS_SPLIT),
    # persistent output pass: 7 programs over 7 blocks x 6 heads (the last program redoes the last tile)
    (1, 97, 6, 16, 40, 3, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), persistent(7, 16)),
    # 5 programs over 2 x 7 blocks x 4 heads x 3 head-dim blocks, float32, no seq_idx
    (2, 100, 4, 48, 16, 2, 64, jnp.float32, "HP", True, True, False, True, (0.0, INF), PERSISTENT_BOTH),
    (2, 64, 4, 24, 16, 4, 64, jnp.bfloat16, "HP", True, False, False, False, (0.0, INF), SsdConfig(block_l=32)),
    # the backward's per-head programs split over head dims: 3 parts of 16 (float32), 2 of 16 (bf16, below)
    (2, 100, 4, 48, 16, 2, 128, jnp.float32, "H", True, True, False, True, (0.0, INF), BWD_HEADDIM_SPLIT),
    (1, 256, 8, 16, 32, 2, 256, jnp.bfloat16, "HP", True, True, True, True, (0.0, 0.05), SsdConfig(block_l=64)),
    (3, 37, 4, 16, 16, 2, 64, jnp.float16, "H", False, True, False, True, (0.0, INF), SsdConfig(block_l=16)),
    (
        2,
        100,
        8,
        32,
        16,
        2,
        64,
        jnp.bfloat16,
        "HP",
        True,
        True,
        True,
        True,
        (0.0, INF),
        SsdConfig(16, fused_forward_max_l=100, bwd_block_p=16),
    ),
    (
        1,
        130,
        8,
        16,
        16,
        1,
        128,
        jnp.float32,
        "H",
        True,
        True,
        True,
        True,
        (0.0, INF),
        split(block_l=32, block_p=32, bwd_head_splits=3),
    ),
    # dB and dC from one program per group looping over its 3 heads, stored in bf16 (no float32 partials to sum)
    (1, 97, 6, 16, 24, 2, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), ONE_DBC_PROGRAM),
    # States kept every 3 blocks (a partial last segment), rebuilt in the backward (3 head-dim tiles in the first):
    # fused and split forward
    (2, 100, 4, 48, 16, 2, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), kept(48, rebuild_block_p=16)),
    (1, 130, 4, 16, 24, 1, 64, jnp.float32, "HP", True, False, True, True, (0.0, INF), KEPT_COLUMNS_SPLIT),
    (1, 1, 2, 16, 16, 1, 64, jnp.float32, "H", False, True, False, True, (0.0, INF), kept(64)),
    # each program computing its block's C·Bᵀ itself (shared_scores=False; the others read it from XLA): fused
    # forward with head dims split in the backward, split forward (float32, partial last block, 3 groups),
    # persistent output pass, one position (in float32: in bf16 at one position dA and ddt are sums that cancel, and
    # 8 of 60 seeds missed the oracle by 1-22% where the float32-internal reference did not)
    (2, 100, 4, 48, 16, 2, 64, jnp.bfloat16, "HP", True, True, True, True, (0.0, INF), OWN_SCORES_FUSED),
    (1, 130, 6, 16, 24, 3, 128, jnp.float32, "H", True, True, True, True, (0.0, INF), OWN_SCORES_SPLIT),
    (2, 37, 4, 16, 16, 2, 64, jnp.float16, "H", True, False, False, True, (0.0, INF), OWN_SCORES_PERSISTENT),
    (1, 1, 2, 16, 16, 1, 64, jnp.float32, None, False, True, False, False, (0.0, INF), OWN_SCORES_FUSED),
    # two-level state passes over segments of 3 blocks (7 blocks: the last segment is 1 block and 2 past the end):
    # split forward with 3 head-dim tiles, with 3 state-column tiles (N 40), and one position (fused forward)
    (2, 100, 4, 48, 16, 2, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), two_level(rebuild_block_p=16)),
    (1, 100, 2, 16, 40, 1, 64, jnp.float32, "HP", True, True, False, True, (0.0, INF), two_level(state_block_n=16)),
    (1, 1, 2, 16, 16, 1, 64, jnp.float32, "H", False, True, False, True, (0.0, INF), kept(64, two_level_states=True)),
    # the same with every block's state kept (segments of state_segment): split forward (partial last segment, seq_idx,
    # 3 head-dim tiles), fused forward with a two-level backward (float32, N 40), and a walk shorter than a segment
    (2, 100, 4, 48, 16, 2, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), TWO_LEVEL_ALL_SPLIT),
    (1, 100, 2, 16, 40, 1, 64, jnp.float32, "HP", True, True, False, True, (0.0, INF), two_level_keep_all()),
    (1, 40, 2, 16, 16, 1, 64, jnp.bfloat16, "H", False, True, True, True, (0.0, INF), TWO_LEVEL_ALL_SHORT),
    # the two-level forward's outputs by a fused walk per segment: kept states every 3 blocks (bf16, seq_idx, initial
    # states, 3 head-dim tiles, the last segment 1 block and 2 past the end), every block's state kept (float32,
    # N 40, own C·Bᵀ), and segments of 2 blocks over 3 (fp16, L 40: the last block partial, one block past L)
    (2, 100, 4, 48, 16, 2, 64, jnp.bfloat16, "HP", True, True, True, True, (0.0, INF), FUSED_SEGMENTS_KEPT),
    (1, 100, 2, 16, 40, 1, 64, jnp.float32, "H", True, True, False, True, (0.0, INF), FUSED_SEGMENTS_ALL),
    (2, 40, 4, 16, 16, 2, 64, jnp.float16, "H", True, True, True, True, (0.0, INF), FUSED_SEGMENTS_SHORT),
    # ... with the backward's state-gradient pass one-level: kept states (bf16, seq_idx, 2 head-dim tiles), every
    # block's state kept (float32, N 24, initial states)
    (2, 100, 4, 32, 16, 2, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), FORWARD_TWO_LEVEL_KEPT),
    (1, 100, 3, 16, 24, 1, 64, jnp.float32, "HP", True, True, False, True, (0.0, INF), FORWARD_TWO_LEVEL_ALL),
    # d cs from row sums: split forward with head dims split in the backward (float32, seq_idx, partial last block),
    # kept states (bf16, 3 groups), own C·Bᵀ with long-lived programs (fp16), dt_limit (bf16), one position
    (1, 100, 4, 32, 16, 2, 64, jnp.float32, "HP", True, True, True, True, (0.0, INF), split(bwd_block_p=16, **ROWWISE)),
    (2, 100, 6, 16, 24, 3, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), kept(48, **ROWWISE)),
    (2, 37, 4, 16, 16, 2, 64, jnp.float16, "H", True, False, False, True, (0.0, INF), OWN_SCORES_PERSISTENT_ROWWISE),
    (1, 256, 8, 16, 32, 2, 256, jnp.bfloat16, "HP", True, True, True, True, (0.0, 0.05), SsdConfig(**ROWWISE)),
    (1, 1, 2, 16, 16, 1, 64, jnp.float32, "H", False, True, False, True, (0.0, INF), SsdConfig(block_l=16, **ROWWISE)),
    # the backward's state products over 16 of N's columns at a time (N 40: 4 steps, the last one partial): shared
    # C·Bᵀ with the row-wise d cs (bf16, seq_idx), own C·Bᵀ summed over the steps too (float32, 2 head-dim parts)
    (2, 100, 4, 32, 40, 2, 64, jnp.bfloat16, "HP", True, True, True, True, (0.0, INF), SsdConfig(**STATE_CHUNKS)),
    (1, 130, 4, 32, 40, 4, 64, jnp.float32, "H", True, True, False, True, (0.0, INF), OWN_SCORES_STATE_CHUNKS),
    # the backward's per-head and dB/dC kernels on Mosaic GPU: 3 blocks, groups of 2 heads, z, D per head dim (bf16);
    # two 64-dim parts per head, N 128, dt_limit, no z (fp16); one block, N 256 (dB/dC in four column tiles), no D, no
    # softplus (bf16). Shapes they do not cover (seq_idx, L or P not multiples of 64) run the Triton kernels: the last
    # two cases
    pytest.param(
        2, 192, 4, 64, 64, 2, 64, jnp.bfloat16, "HP", True, True, False, True, (0.0, INF), MOSAIC, id="mosaic"
    ),
    pytest.param(
        1,
        128,
        2,
        128,
        128,
        1,
        256,
        jnp.float16,
        "H",
        False,
        False,
        False,
        True,
        (0.0, 0.05),
        MOSAIC,
        id="mosaic-p128",
    ),
    pytest.param(
        1,
        64,
        2,
        64,
        256,
        1,
        64,
        jnp.bfloat16,
        None,
        True,
        True,
        False,
        False,
        (0.0, INF),
        MOSAIC_64_COLUMNS,
        id="mosaic-n256",
    ),
    pytest.param(
        1, 128, 2, 64, 64, 1, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), MOSAIC, id="mosaic-seq"
    ),
    # the forward's walk and the state passes on Mosaic GPU too: whole (initial state, z, D per head dim, groups of 2
    # heads, bf16: the backward's one-level walk from d final_states to d initial_states through z's gate; two blocks
    # at N 256, no D, no softplus), per segment (5 blocks in segments of 2, 2 and 1: the last walk shorter, both ways;
    # two 64-dim parts per head, N 128, fp16, dt_limit, every block's state stored) and per segment with kept float32
    # states (the backward's rebuild; one stage). The N 256 case and the per-segment one load B and C in two pieces
    # of N's columns by the walk's hand-made loop (``fwd_walk_pieces``), the others by ``emit_pipeline``. The
    # halves cases hold the state in halves of N on two warpgroups (``fwd_walk_warpgroups``): whole over 4 blocks at
    # N 256 (every slot refilled; D per head dim, z), per segment at N 128 (P 128, fp16, no z). A whole walk keeping
    # float32 states every 2 of its 3 blocks runs per segment of them, from an initial state.
    pytest.param(
        *(2, 192, 4, 64, 64, 2, 64, jnp.bfloat16, "HP", True, True, False, True, (0.0, INF), MOSAIC_FORWARD),
        id="mosaic-forward",
    ),
    pytest.param(
        *(1, 128, 2, 64, 256, 1, 64, jnp.bfloat16, None, True, True, False, False, (0.0, INF)),
        MOSAIC_FORWARD_PIECES,
        id="mosaic-forward-n256",
    ),
    pytest.param(
        *(1, 320, 2, 128, 128, 1, 64, jnp.float16, "H", False, True, False, True, (0.0, 0.05), MOSAIC_SEGMENTS_PIECES),
        id="mosaic-segments",
    ),
    pytest.param(
        *(1, 256, 2, 64, 256, 1, 64, jnp.bfloat16, "HP", True, True, False, True, (0.0, INF), MOSAIC_FORWARD_HALVES),
        id="mosaic-forward-halves",
    ),
    pytest.param(
        *(1, 320, 2, 128, 128, 1, 64, jnp.float16, "H", False, True, False, True, (0.0, 0.05), MOSAIC_SEGMENTS_HALVES),
        id="mosaic-segments-halves",
    ),
    pytest.param(
        *(1, 320, 4, 64, 64, 2, 64, jnp.bfloat16, "HP", True, True, False, True, (0.0, INF), MOSAIC_SEGMENTS_KEPT),
        id="mosaic-segments-kept",
    ),
    pytest.param(
        *(1, 192, 2, 64, 64, 1, 64, jnp.bfloat16, "H", True, True, False, True, (0.0, INF), MOSAIC_FORWARD_KEPT),
        id="mosaic-forward-kept",
    ),
    pytest.param(
        1, 100, 2, 64, 64, 1, 64, jnp.bfloat16, "H", True, True, False, True, (0.0, INF), MOSAIC, id="mosaic-l100"
    ),
]


@pytest.mark.parametrize(
    "batch,seqlen,nheads,headdim,dstate,groups,chunk,dtype,D,z,init,seq,softplus,dt_limit,config", CASES
)
def test_pallas_matches_oracle_and_reference(
    rng, batch, seqlen, nheads, headdim, dstate, groups, chunk, dtype, D, z, init, seq, softplus, dt_limit, config
):
    arrays, exact, seq_idx = make_inputs(
        rng, batch, seqlen, nheads, headdim, dstate, groups, dtype, D=D, z=z, init=init, seq=seq, softplus=softplus
    )
    dout = jnp.asarray(rng.normal(size=(batch, seqlen, nheads, headdim)), dtype)
    dfinal = jnp.asarray(rng.normal(size=(batch, nheads, headdim, dstate)), jnp.float32)
    out, final, grads = run_with_vjp(
        arrays, seq_idx, chunk, softplus, dt_limit, dout, dfinal, impl="pallas", config=config
    )
    ref_out, ref_final, ref_grads = run_with_vjp(arrays, seq_idx, chunk, softplus, dt_limit, dout, dfinal)
    as64 = lambda t: np.asarray(t.astype(jnp.float32), np.float64)  # noqa: E731
    want_out, want_final, want_grads, spread = oracle_with_spread(
        exact, seq_idx, softplus, dt_limit, as64(dout), as64(dfinal)
    )

    assert out.dtype == dtype and final.dtype == jnp.float32
    assert_close("out", out, want_out, dtype)
    assert_close("out vs reference", out, ref_out, dtype)
    assert_close("final_states", final, want_final, dtype)
    assert_close("final_states vs reference", final, ref_final, dtype)
    for name, grad in grads.items():
        assert grad.dtype == arrays[name].dtype, name
        scale = REDUCED_GRAD_SCALE if name in REDUCED_GRADS and dtype != jnp.float32 else 1.0
        floor = float(np.linalg.norm(spread[name])) if name in spread and dtype != jnp.float32 else 0.0
        assert_close(f"d{name}", grad, want_grads[name], dtype, scale, floor)
        # the reference's dA and d dt_bias are float32 sums over batch x L too: against it, no tighter than its own
        # error from the oracle (float32, L 1000, TEST_SEED=1210755715: dA 1.8e-4 from the oracle, ours 5.6e-5)
        ref_scale = reference_noise_scale(ref_grads[name], want_grads[name], dtype, scale, floor)
        assert_close(f"d{name} vs reference", grad, ref_grads[name], dtype, ref_scale, floor)


@pytest.mark.parametrize(("programs", "kernel"), [(3, "ssd_fwd_out_persistent"), (64, "ssd_fwd_out")])
def test_persistent_output_pass_runs_when_fewer_programs_than_tiles(rng, programs, kernel):
    """2 x 4 blocks x 2 heads = 16 tiles: 3 programs loop over them; 64 would be more than tiles, so the ordinary grid
    runs (same values either way)."""
    arrays, _, _ = make_inputs(rng, 2, 64, 2, 16, 16, 1, jnp.float32, D="H", z=True, init=False)
    inputs = [arrays[k] for k in ("x", "dt", "A", "B", "C", "D", "z")]

    def run(config):
        def call(x, dt, A, B, C, D, z):
            return mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, z=z, impl="pallas", config=config)

        return call

    config = split(block_l=16, persistent_programs=programs)
    assert kernel in str(jax.make_jaxpr(run(config))(*inputs))
    np.testing.assert_array_equal(np.asarray(run(config)(*inputs)), np.asarray(run(split(block_l=16))(*inputs)))


@pytest.mark.parametrize(("programs", "kernel"), [(5, "ssd_bwd_dx_persistent"), (64, "ssd_bwd_dx")])
def test_persistent_backward_kernel_runs_when_fewer_programs_than_tiles(rng, programs, kernel):
    """The backward's per-head kernel on 2 x 4 blocks x 2 heads = 16 tiles: 5 programs loop over them (4 steps, the
    last tile redone by 4 programs); 64 would be more than tiles, so the ordinary grid runs. Same gradients."""
    arrays, _, _ = make_inputs(rng, 2, 64, 2, 16, 16, 1, jnp.float32, D="H", z=True, init=False)
    inputs = [arrays[k] for k in ("x", "dt", "A", "B", "C", "D", "z")]
    dout = jnp.asarray(rng.normal(size=(2, 64, 2, 16)), jnp.float32)

    def grads(config):
        def call(x, dt, A, B, C, D, z):
            return mamba_chunk_scan_combined(x, dt, A, B, C, 64, D=D, z=z, impl="pallas", config=config)

        return jax.vjp(call, *inputs)[1]

    config = split(block_l=16, bwd_persistent_programs=programs)
    assert kernel in str(jax.make_jaxpr(grads(config))(dout))
    for got, want in zip(grads(config)(dout), grads(split(block_l=16))(dout), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("fused", [True, False])
def test_kept_states_are_all_the_forward_saves(rng, fused):
    """With checkpoint_every the vjp keeps the (batch, L / every, H, P, N) float32 states and no per-block ones."""
    arrays, _, _ = make_inputs(rng, 2, 160, 4, 16, 16, 1, jnp.bfloat16, D="H", z=True, init=False)
    inputs = [arrays[k] for k in ("x", "dt", "A", "B", "C")]
    config = kept(64, fused_forward_max_l=160 if fused else 0)

    def run(x, dt, A, B, C):
        return mamba_chunk_scan_combined(x, dt, A, B, C, 64, impl="pallas", config=config)

    _, vjp = jax.vjp(run, *inputs)
    shapes = {(tuple(r.shape), r.dtype) for r in jax.tree.leaves(vjp) if r.ndim == 5}
    assert shapes == {((2, 3, 4, 16, 16), np.dtype(np.float32))}, (
        shapes
    )  # 10 blocks of 16, kept every 4: blocks 0, 4, 8


def test_checkpoint_every_sets_only_the_kept_states_of_the_default_tiling(rng):
    """checkpoint_every=128 keeps float32 states every 2 blocks of 64 (the rest rebuilt in the backward) where the
    default keeps every block's in x's dtype; outputs and gradients agree with the default's; 0 keeps every block's."""
    arrays, _, _ = make_inputs(rng, 2, 200, 4, 16, 16, 2, jnp.float32, D="H", z=True, init=False)
    inputs = [arrays[k] for k in ("x", "dt", "A", "B", "C")]
    dout = jnp.asarray(rng.normal(size=inputs[0].shape), jnp.float32)

    def states_and_grads(every):
        def run(x, dt, A, B, C):
            return mamba_chunk_scan_combined(x, dt, A, B, C, 64, impl="pallas", checkpoint_every=every)

        out, vjp = jax.vjp(run, *inputs)
        kept = {(tuple(r.shape), r.dtype) for r in jax.tree.leaves(vjp) if r.ndim == 5}
        return kept, out, vjp(dout)

    default_kept, out, grads = states_and_grads(None)
    assert default_kept == states_and_grads(0)[0] == {((2, 4, 4, 16, 16), np.dtype(np.float32))}  # 4 blocks of 64
    kept, every_out, every_grads = states_and_grads(128)
    assert kept == {((2, 2, 4, 16, 16), np.dtype(np.float32))}  # blocks 0 and 2
    assert_close("out", every_out, out, jnp.float32)
    for name, got, want in zip("x dt A B C".split(), every_grads, grads, strict=True):
        assert_close(f"d{name}", got, want, jnp.float32)


def test_keeping_states_every_matches_the_two_level_segments():
    from pallas_kernels.ssd.config import default_config, keeping_states_every

    two_level = default_config(1, 65536, 24, 64, 128, 2)
    assert two_level.two_level_states
    assert keeping_states_every(two_level, 512).state_segment == keeping_states_every(two_level, 512).checkpoint_every
    assert keeping_states_every(two_level, 0).state_segment == two_level.state_segment  # every block's: segments kept
    one_level = default_config(8, 2048, 24, 64, 128, 2)
    assert keeping_states_every(one_level, 1024).state_segment == one_level.state_segment


def test_default_config_keeps_every_block_state_only_while_they_are_small():
    from pallas_kernels.ssd.config import KEEP_EVERY, LONG_SEGMENT, default_config

    assert default_config(8, 2048, 24, 64, 128, 2).checkpoint_every == 0  # mamba2-130m layer: 100 MB
    assert default_config(4, 2048, 80, 64, 128, 2).checkpoint_every == 0  # 2.7b layer: 168 MB
    assert default_config(4, 16384, 64, 64, 128, 2).checkpoint_every == KEEP_EVERY  # 1 GB
    assert default_config(1, 65536, 128, 64, 128, 2).checkpoint_every == LONG_SEGMENT  # 2.1 GB, two-level segments
    assert default_config(1, 65536, 24, 64, 128, 2).checkpoint_every == LONG_SEGMENT  # 130m at L 65536: 400 MB


def test_default_config_fuses_the_forward_only_where_its_programs_fill_the_gpu():
    from pallas_kernels.ssd.config import default_config

    assert default_config(8, 2048, 24, 64, 128, 2).fused_forward_max_l > 0  # 192 programs on 132 SMs
    assert default_config(4, 2048, 80, 64, 128, 2).fused_forward_max_l > 0  # 320
    assert default_config(2, 8192, 32, 64, 256, 2).fused_forward_max_l == 0  # 64
    assert default_config(16, 512, 8, 64, 64, 2).fused_forward_max_l == 0  # 128
    assert default_config(16, 512, 8, 64, 64, 2, sm_count=100).fused_forward_max_l > 0  # a smaller GPU
    assert default_config(1, 2048, 4, 128, 64, 2, sm_count=8).fused_forward_max_l > 0  # 2 tiles of 64 head dims


def test_default_config_splits_the_backward_head_dims_up_to_n_128():
    from pallas_kernels.ssd.config import default_config

    for dstate in (64, 128):
        config = default_config(8, 2048, 24, 64, dstate, 2)
        assert (config.bwd_block_p, config.bwd_num_warps) == (32, 4)
    config = default_config(2, 8192, 32, 64, 256, 2)
    assert (config.bwd_block_p, config.bwd_num_warps) == (SsdConfig().bwd_block_p, SsdConfig().bwd_num_warps)


def test_default_config_takes_the_rowwise_decay_gradient_at_every_shape():
    from pallas_kernels.ssd.config import default_config

    shapes = [(8, 2048, 24, 64, 128), (1, 65536, 128, 64, 128), (2, 8192, 32, 64, 256), (16, 512, 8, 64, 64)]
    assert all(default_config(*shape, 2).bwd_rowwise_dcs for shape in shapes)
    assert not SsdConfig().bwd_rowwise_dcs  # the tile sums stay reachable (and tested) by an explicit SsdConfig


def test_default_config_state_passes_take_wider_tiles_only_where_enough_programs_remain():
    from pallas_kernels.ssd.config import default_config

    assert default_config(4, 2048, 80, 64, 128, 2).state_block_p == 64  # 2.7b: 320 programs
    assert default_config(4, 4096, 64, 64, 128, 2).state_block_p == 64  # 256
    assert default_config(1, 65536, 128, 64, 128, 2).state_block_p == 32  # 256 programs (128 at 64), a long walk
    assert default_config(8, 2048, 24, 64, 128, 2).state_block_p == 16  # 130m: 192 at 64; L too short for 32
    assert default_config(16, 512, 8, 64, 64, 2).state_block_p == 16
    assert default_config(2, 8192, 32, 64, 256, 2).state_block_p == 16  # 128 at 32
    assert default_config(1, 65536, 2, 64, 128, 2).state_block_p == 16  # too few at any tile: the narrowest


def test_default_config_takes_two_level_state_passes_for_long_walks_short_of_programs():
    """Measured on an H100 (docs/kernels.md#ssd-default-config)."""
    from pallas_kernels.ssd.config import KEEP_EVERY, LONG_SEGMENT, default_config

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
    from pallas_kernels.ssd.config import default_config

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
    from pallas_kernels.ssd.config import default_config

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
    from pallas_kernels.ssd.config import KEEP_EVERY, SHORT_SEGMENT, default_config

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
    from pallas_kernels.ssd.config import KEEP_EVERY, PARTIAL_WAVE_SEGMENT, default_config

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
    from pallas_kernels.ssd.config import default_config

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
    from pallas_kernels.ssd.config import default_config

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
    from pallas_kernels.ssd.config import default_config

    for shape in [(8, 2048, 24, 64, 128), (1, 65536, 128, 64, 128), (2, 8192, 32, 64, 256), (2, 2048, 32, 128, 128)]:
        assert default_config(*shape, 2).states_mosaic
    for itemsize, wgmma, seqlen, headdim in [(2, False, 2048, 64), (4, True, 2048, 64), (2, True, 2000, 64)]:
        assert not default_config(8, seqlen, 24, headdim, 128, itemsize, wgmma=wgmma).states_mosaic
    assert not default_config(8, 2048, 24, 48, 128, 2).states_mosaic  # head dims not in 64s


def test_default_config_walks_the_forward_on_one_stage_where_two_programs_then_share_an_sm_in_fewer_rounds():
    """Measured on an H200 (docs/kernels.md#ssd-default-config): one stage won at 130m (192 programs, one round paired
    against two alone), B1 L65536 H128 (4096 segment programs) and N 256, lost at 2.7b (320: two paired rounds against
    three alone). Two stages already pair at N 64; one stage cannot pair past N 192."""
    from pallas_kernels.ssd.config import SM_SHARED_BYTES, default_config, walk_shared_bytes

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
    from pallas_kernels.ssd.config import PROGRAM_RESERVED_BYTES, SM_SHARED_BYTES, default_config, walk_shared_bytes

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
    from pallas_kernels.ssd.config import default_config

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


@pytest.mark.parametrize("D", ["H", "HP"])
def test_mosaic_dD_from_bf16_inputs_keeps_float32_accuracy(rng, D):
    """dD is a float32 sum over positions of dy x, with dy = dout silu(z) in float32, as mamba-ssm forms it: its bf16
    and float32 runs give the same dD to 2e-7. Taken as the diagonal of a bf16 product (dy rounded to bf16) it is 1.8e-3
    from mamba-ssm at 130m (measured on an H200) and 4.5e-3 from the oracle here."""
    arrays, exact, _ = make_inputs(rng, 2, 128, 2, 64, 64, 1, jnp.bfloat16, D=D, z=True, init=False)
    dout = jnp.asarray(rng.normal(size=(2, 128, 2, 64)), jnp.bfloat16)
    dfinal = jnp.zeros((2, 2, 64, 64), jnp.float32)
    _, _, grads = run_with_vjp(arrays, None, 64, True, (0.0, INF), dout, dfinal, impl="pallas", config=MOSAIC_DX)
    as64 = lambda t: np.asarray(jnp.asarray(t, jnp.float32), np.float64)  # noqa: E731
    _, _, want = oracle(exact, None, True, (0.0, INF), as64(dout), as64(dfinal))
    assert_close("dD", grads["D"], want["D"], jnp.float32)


def test_mosaic_sigmoid_is_the_logistic_function_from_underflow_to_saturation():
    """``mosaic.sigmoid`` (rsqrt(1 + exp(-z)) squared, the Mosaic GPU kernels' gate) against the float64 logistic
    function over float32's range: exp's overflow below about -88 gives 0, large z gives 1, never a NaN."""
    from pallas_kernels.ssd.mosaic import sigmoid

    z = np.concatenate([np.linspace(-120.0, 120.0, 4801), [0.0, -88.5, 88.5, -1e30, 1e30]]).astype(np.float32)
    got = np.asarray(jax.jit(sigmoid)(jnp.asarray(z)))
    with np.errstate(over="ignore"):  # exp(1e30) is inf in float64 too: the logistic function's 0
        want = 1.0 / (1.0 + np.exp(-z.astype(np.float64)))
    assert got.dtype == np.float32 and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-37)
    assert got[-2] == 0.0 and got[-1] == 1.0


def test_mosaic_gpu_backward_kernels_cover_16_bit_shapes_in_blocks_and_tiles_of_64():
    """``mosaic_dx_supported`` and ``mosaic_dbc_supported``: the shapes the Mosaic GPU kernels take (the rest stay
    on the Triton kernels)."""
    from pallas_kernels.ssd.block import ssd_dims
    from pallas_kernels.ssd.kernel_bwd_dbc_mosaic import mosaic_dbc_supported
    from pallas_kernels.ssd.kernel_bwd_mosaic import mosaic_dx_supported

    def covered(seqlen=128, headdim=64, dstate=64, dtype=jnp.bfloat16, seq=False, block_l=64, kernel="dx"):
        x = jnp.zeros((1, seqlen, 2, headdim), dtype)
        B = jnp.zeros((1, seqlen, 1, dstate), dtype)
        seq_idx = jnp.zeros((1, seqlen), jnp.int32) if seq else None
        dims = ssd_dims(x, B, None, None, None, None, seq_idx, True, (0.0, INF), block_l, 64, True)
        return (mosaic_dx_supported if kernel == "dx" else mosaic_dbc_supported)(dims, dtype)

    for kernel in ("dx", "dbc"):
        assert covered(kernel=kernel) and covered(headdim=128, dstate=256, dtype=jnp.float16, kernel=kernel)
        assert not covered(seqlen=100, kernel=kernel)  # a partial last block
        assert not covered(headdim=48, kernel=kernel) and not covered(dstate=40, kernel=kernel)
        assert not covered(dstate=512, kernel=kernel) and not covered(dtype=jnp.float32, kernel=kernel)
        assert not covered(seq=True, kernel=kernel) and not covered(block_l=32, kernel=kernel)
    assert covered(dstate=192) and not covered(dstate=192, kernel="dbc")  # dB/dC's column tiles: N <= 128 or 256


def trace_pallas(arrays: dict, seq_idx, config: SsdConfig, *, backward: bool = True) -> None:
    """Traces, without compiling or running, the Pallas forward (and backward, pulling back its own outputs) of
    every non-None input at chunk 64: a shape's kernels are chosen while tracing, so the dispatch tests below need
    no interpreted run (the values of each dispatch are the oracle cases above)."""
    names = [k for k, v in arrays.items() if v is not None]

    def forward(*values):
        return mamba_chunk_scan_combined(
            **dict(zip(names, values, strict=True)),
            chunk_size=64,
            seq_idx=None if seq_idx is None else jnp.asarray(seq_idx),
            dt_softplus=True,
            return_final_states=True,
            impl="pallas",
            config=config,
        )

    def traced(*values):
        outputs, vjp = jax.vjp(forward, *values)
        return vjp(outputs) if backward else outputs

    jax.eval_shape(traced, *[arrays[k] for k in names])


def test_the_backward_runs_the_mosaic_gpu_kernels_only_where_they_cover_the_shape(rng, monkeypatch):
    """``bwd_dx_mosaic`` and ``bwd_dbc_mosaic`` send a covered shape to ``mosaic_dx`` and ``mosaic_dbc`` and the
    others (seq_idx here) to the Triton kernels (the gradients of both: the cases ``mosaic*`` above); each switch
    alone moves its own kernel."""
    from pallas_kernels.ssd import kernel_bwd

    jax.clear_caches()  # traced afresh: a call cached by an earlier test (pallas.py's jit) would record nothing
    calls = []
    dims_of = lambda args: next(a for a in args if isinstance(a, SsdDims))  # noqa: E731
    for name in ("mosaic_dx", "mosaic_dbc"):
        real = getattr(kernel_bwd, name)
        monkeypatch.setattr(kernel_bwd, name, lambda *a, n=name, f=real: calls.append((n, dims_of(a))) or f(*a))
    runs = ((False, MOSAIC, ["mosaic_dx", "mosaic_dbc"]), (True, MOSAIC, []))  # with seq_idx: none
    runs += ((False, MOSAIC_DX, ["mosaic_dx"]), (False, SsdConfig(bwd_dbc_mosaic=True), ["mosaic_dbc"]))
    for seq, config, expected in runs:
        calls.clear()
        arrays, _, seq_idx = make_inputs(rng, 1, 128, 2, 64, 64, 1, jnp.bfloat16, seq=seq)
        trace_pallas(arrays, seq_idx, config)
        assert [name for name, _ in calls] == expected, (seq, config)
        assert not any(dims.has_seq for _, dims in calls)


def test_the_forward_keeps_the_pre_gate_output_only_for_a_backward_that_reads_it(rng, monkeypatch):
    """The Mosaic GPU per-head kernel recomputes the pre-gate output (its dz is checked against the oracle in the
    ``mosaic*`` cases above), so the forward leaves it out of the residuals there; the Triton kernel, which reads it,
    gets it: seq_idx, the switch off, a partial last block."""
    from pallas_kernels.ssd import pallas

    jax.clear_caches()  # traced afresh: a call cached by an earlier test (pallas.py's jit) would record nothing
    kept = []
    real = pallas.ssd_backward
    monkeypatch.setattr(pallas, "ssd_backward", lambda *a: kept.append(a[11] is not None) or real(*a))
    runs = [(False, 128, MOSAIC, False), (False, 128, MOSAIC_DX, False), (False, 128, MOSAIC_FORWARD, False)]
    runs += [(True, 128, MOSAIC, True), (False, 100, MOSAIC, True), (False, 128, SsdConfig(), True)]
    for seq, seqlen, config, expected in runs:
        kept.clear()
        arrays, _, seq_idx = make_inputs(rng, 1, seqlen, 2, 64, 64, 1, jnp.bfloat16, seq=seq)
        trace_pallas(arrays, seq_idx, config)
        assert kept == [expected], (seq, seqlen, config)


def test_the_forward_walks_on_mosaic_gpu_only_where_it_covers_the_shape(rng, monkeypatch):
    """``fwd_mosaic`` sends the fused walks (whole, per segment) of a covered shape to ``mosaic_walk``, and the rest
    to the Triton kernels: seq_idx, a partial last block. A whole walk that keeps float32 states every few blocks
    runs per segment of them (the Mosaic walk stores every block's or none). Outputs and final states agree with the
    oracle either way (the cases ``mosaic-forward*`` and ``mosaic-segments*`` above)."""
    from pallas_kernels.ssd import kernel_fwd

    jax.clear_caches()  # traced afresh: a call cached by an earlier test (pallas.py's jit) would record nothing
    calls = []
    real = kernel_fwd.mosaic_walk
    monkeypatch.setattr(kernel_fwd, "mosaic_walk", lambda *a, **k: calls.append(k["segment_blocks"]) or real(*a, **k))
    runs = [  # seq_idx, L, config, the walks' segment lengths in blocks
        (False, 192, MOSAIC_FORWARD, [3]),
        (False, 320, MOSAIC_SEGMENTS, [2]),
        (False, 320, MOSAIC_SEGMENTS_KEPT, [2]),
        (True, 192, MOSAIC_FORWARD, []),
        (False, 100, MOSAIC_FORWARD, []),
        (False, 192, MOSAIC_FORWARD_KEPT, [2]),
        (False, 192, MOSAIC, []),
    ]
    for seq, seqlen, config, expected in runs:
        calls.clear()
        arrays, _, seq_idx = make_inputs(rng, 1, seqlen, 2, 64, 64, 1, jnp.bfloat16, init=False, seq=seq)
        trace_pallas(arrays, seq_idx, config, backward=False)
        assert calls == expected, (seq, seqlen, config)


def test_the_state_passes_walk_on_mosaic_gpu_only_where_it_covers_the_shape(rng, monkeypatch):
    """``states_mosaic`` sends every sequential state pass of a covered shape, forward and backward, to
    ``mosaic_state_walk``, and the rest to the Triton kernels: seq_idx, a partial last block, the switch off. Their
    values are the cases ``mosaic-forward*`` and ``mosaic-segments*`` above: here, which walks a forward+backward
    traces."""
    from pallas_kernels.ssd import kernel_bwd, kernel_fwd

    jax.clear_caches()  # traced afresh: a call cached by an earlier test (pallas.py's jit) would record nothing
    calls = []
    real = kernel_fwd.mosaic_state_walk

    def record(*args, **kwargs):
        calls.append(tuple(kwargs[k] for k in ("reverse", "segment_blocks", "states", "end")))
        return real(*args, **kwargs)

    for module in (kernel_fwd, kernel_bwd):
        monkeypatch.setattr(module, "mosaic_state_walk", record)
    local, segment_grads = (False, 2, False, True), [(True, 2, False, True), (True, 2, True, False)]
    runs = [  # seq_idx, L, config, the walks (reverse, segment blocks, block states stored, end state left)
        (False, 192, MOSAIC_FORWARD, [(True, 3, True, True)]),  # the one-level backward, to d initial_states
        (False, 320, MOSAIC_SEGMENTS, [local, *segment_grads]),
        (False, 320, MOSAIC_SEGMENTS_KEPT, [local, (False, 2, True, False), *segment_grads]),  # the rebuild
        (True, 320, MOSAIC_SEGMENTS_KEPT, []),
        (False, 100, MOSAIC_FORWARD, []),
        (False, 320, dataclasses.replace(MOSAIC_SEGMENTS_KEPT, states_mosaic=False), []),
    ]
    for seq, seqlen, config, expected in runs:
        calls.clear()
        arrays, _, seq_idx = make_inputs(rng, 1, seqlen, 2, 64, 64, 1, jnp.bfloat16, seq=seq)
        trace_pallas(arrays, seq_idx, config)
        assert calls == expected, (seq, seqlen, config)


def test_default_config_runs_the_mosaic_gpu_kernels_on_gpus_with_wgmma(rng, monkeypatch):
    """Measured on an H100 (docs/kernels.md#ssd-default-config): both Mosaic GPU kernels up to N 128 and P 64, the
    per-head one beyond. ``wgmma`` is Hopper's alone (compute capability 9.x: not an A100's 8.0, nor a B200's 10.0), and
    the interpreter stands in for an H100. A config that asks for a Mosaic kernel on another GPU is refused."""
    from types import SimpleNamespace

    from pallas_kernels import _triton
    from pallas_kernels.ssd.api import pallas_config
    from pallas_kernels.ssd.config import default_config

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
    from pallas_kernels.ssd.config import default_config

    assert default_config(8, 2048, 24, 64, 128, 2).shared_scores  # 130m: 24 heads share one group's C·Bᵀ
    assert default_config(4, 4096, 64, 64, 128, 2, ngroups=8).shared_scores  # 8 heads per group
    assert not default_config(16, 512, 8, 64, 64, 2, ngroups=8).shared_scores  # one head per group: nothing shared


def test_gradient_through_final_states_alone(rng):
    """The state's gradient path on its own (out unused): dx, ddt, dB, d initial_states from dfinal only."""
    arrays, exact, _ = make_inputs(rng, 2, 45, 2, 16, 16, 1, jnp.float32, D=None, z=False)
    dout = jnp.zeros((2, 45, 2, 16), jnp.float32)
    dfinal = jnp.asarray(rng.normal(size=(2, 2, 16, 16)), jnp.float32)
    _, _, grads = run_with_vjp(
        arrays, None, 64, True, (0.0, INF), dout, dfinal, impl="pallas", config=SsdConfig(block_l=16)
    )
    _, _, want = oracle(exact, None, True, (0.0, INF), np.zeros((2, 45, 2, 16)), np.asarray(dfinal, np.float64))
    for name in ("x", "dt", "A", "B", "initial_states", "dt_bias"):
        assert_close(f"d{name}", grads[name], want[name], jnp.float32)
    assert not np.any(np.asarray(grads["C"]))  # C only reads the state out


@pytest.mark.parametrize("rowwise", [True, False])
def test_decay_gradients_stay_exact_at_large_decays(rng, rowwise):
    """dt x |A| of 5-60 a step, as a module test's random weights reached (TEST_SEED=32): across a 64-position block
    the log-decays sum to thousands, the intra-block term's diagonal dwarfs the rest of d cs, and its rounding, had it
    been left in the row and column sums that cancel it, was most of d dt and dA. Float32 against the oracle at the
    float32 tolerance or, where the pure-JAX reference at the kernels' block length (64) is farther off, no farther
    than it allows (``reference_noise_scale``), both ways of taking d cs, with a partial last block; dA and d dt_bias,
    sums over batch and L that can cancel to a small fraction of their terms, relative to at least their terms'
    spread. On 8 seeds the reference was 5-30x farther from the oracle's dA than the kernels; with the diagonal in
    the sums the kernels' dA was 4.3e-3 from it (d cs by rows)."""
    arrays, exact, _ = make_inputs(rng, 2, 150, 4, 16, 16, 2, jnp.float32, D="H", z=True, init=True)
    raw_dt = rng.normal(3.0, 1.0, (2, 150, 4))
    A = -np.exp(rng.uniform(1.0, 3.0, 4))
    arrays.update(dt=jnp.asarray(raw_dt, jnp.float32), A=jnp.asarray(A, jnp.float32))
    exact.update(dt=np.asarray(arrays["dt"], np.float64), A=np.asarray(arrays["A"], np.float64))
    dout = jnp.asarray(rng.normal(size=(2, 150, 4, 16)), jnp.float32)
    dfinal = jnp.asarray(rng.normal(size=(2, 4, 16, 16)), jnp.float32)
    config = SsdConfig(bwd_rowwise_dcs=rowwise)
    _, _, grads = run_with_vjp(arrays, None, 64, True, (0.0, INF), dout, dfinal, impl="pallas", config=config)
    as64 = lambda t: np.asarray(t, np.float64)  # noqa: E731
    _, _, want, spread = oracle_with_spread(exact, None, True, (0.0, INF), as64(dout), as64(dfinal))
    _, _, ref_grads = run_with_vjp(arrays, None, 64, True, (0.0, INF), dout, dfinal)
    for name in ("dt", "A", "dt_bias", "x", "B", "C"):
        floor = float(np.linalg.norm(spread[name])) if name in spread else 0.0
        scale = reference_noise_scale(ref_grads[name], want[name], jnp.float32, 1.0, floor)
        assert_close(f"d{name}", grads[name], want[name], jnp.float32, scale, floor)


def test_bf16_inputs_keep_their_dtypes_mixed_with_float32_b(rng):
    """B and C in float32 with bf16 x: the kernels take one dot dtype, the gradients keep each input's dtype."""
    arrays, _, _ = make_inputs(rng, 1, 40, 2, 16, 16, 1, jnp.bfloat16)
    arrays["B"] = arrays["B"].astype(jnp.float32)
    dout = jnp.asarray(rng.normal(size=(1, 40, 2, 16)), jnp.bfloat16)
    dfinal = jnp.zeros((1, 2, 16, 16), jnp.float32)
    out, _, grads = run_with_vjp(
        arrays, None, 64, True, (0.0, INF), dout, dfinal, impl="pallas", config=SsdConfig(block_l=16)
    )
    ref_out, _, ref_grads = run_with_vjp(arrays, None, 64, True, (0.0, INF), dout, dfinal)
    assert grads["B"].dtype == jnp.float32 and grads["C"].dtype == jnp.bfloat16
    assert_close("out", out, ref_out, jnp.bfloat16)
    assert_close("dB", grads["B"], ref_grads["B"], jnp.bfloat16)


def test_pallas_refuses_two_walk_warpgroups_interpreted_without_a_thread_each(monkeypatch):
    """The interpreter needs a CPU thread for each of a program's warpgroups beside the program's own
    (``interpreted_warpgroups``): with fewer it would hang, so it is refused up front, and the default config keeps
    one."""
    from pallas_kernels.ssd.api import pallas_config

    monkeypatch.setenv("PJRT_NPROC", "2")
    x, B = jnp.zeros((1, 64, 2, 64)), jnp.zeros((1, 64, 1, 256))
    config = SsdConfig(fwd_mosaic=True, fwd_walk_warpgroups=2)
    message = r"fwd_walk_warpgroups=2 interpreted needs XLA's CPU pool of at least 3 threads .* this process has 2"
    with pytest.raises(ValueError, match=message):
        mamba_chunk_scan_combined(x, jnp.zeros((1, 64, 2)), -jnp.ones(2), B, B, 64, impl="pallas", config=config)
    assert pallas_config(2, 8192, 32, 64, 256, jnp.bfloat16, ngroups=4).fwd_walk_warpgroups == 1
    monkeypatch.setenv("PJRT_NPROC", "3")
    assert pallas_config(2, 8192, 32, 64, 256, jnp.bfloat16, ngroups=4).fwd_walk_warpgroups == 2


@pytest.mark.parametrize(
    "change,message",
    [
        ({"headdim": 160}, r"headdim \(x.shape\[3\]\) up to 128, got 160"),
        ({"dstate": 320}, r"N \(B.shape\[3\]\) up to 256, got 320"),
        ({"config": SsdConfig(block_l=24)}, "SsdConfig.block_l must be a power of two >= 16, got 24"),
        ({"config": SsdConfig(num_warps=3)}, "SsdConfig.num_warps must be a positive power of two, got 3"),
        ({"config": {"block_l": 64}}, "config must be an instance of SsdConfig, got dict"),
        ({"config": SsdConfig(checkpoint_every=96)}, "checkpoint_every must be 0 or a positive multiple of block_l=64"),
        ({"config": SsdConfig(shared_scores=1)}, "SsdConfig.shared_scores must be a bool, got 1"),
        ({"config": SsdConfig(bwd_rowwise_dcs="yes")}, "SsdConfig.bwd_rowwise_dcs must be a bool, got 'yes'"),
        ({"config": SsdConfig(bwd_state_chunk=24)}, "SsdConfig.bwd_state_chunk must be 0 or a power of two >= 16"),
        ({"config": SsdConfig(bwd_persistent_programs=-1)}, "SsdConfig.bwd_persistent_programs must be an int >= 0"),
        ({"config": SsdConfig(state_segment=100)}, "state_segment must be a positive multiple of block_l=64, got 100"),
        ({"config": SsdConfig(bwd_dbc_columns=32)}, "SsdConfig.bwd_dbc_columns must be 64 or 128, got 32"),
        ({"config": SsdConfig(fwd_walk_stages=0)}, "SsdConfig.fwd_walk_stages must be a positive int, got 0"),
        (
            {"dstate": 256, "config": SsdConfig(fwd_mosaic=True, fwd_walk_stages=3)},
            r"fwd_walk_stages=3 needs 291 KB of shared memory for the forward's Mosaic walk at N=256, more than an "
            "SM's 227",
        ),
        ({"config": SsdConfig(fwd_walk_pieces=3)}, "SsdConfig.fwd_walk_pieces must be 1, 2 or 4, got 3"),
        (
            {"dstate": 64, "config": SsdConfig(fwd_mosaic=True, fwd_walk_pieces=2)},
            r"fwd_walk_pieces=2 splits N \(B.shape\[3\]\) into pieces of a multiple of 64 columns, got N=64",
        ),
        ({"config": SsdConfig(fwd_walk_warpgroups=3)}, "SsdConfig.fwd_walk_warpgroups must be 1 or 2, got 3"),
        (
            {"dstate": 64, "config": SsdConfig(fwd_mosaic=True, fwd_walk_warpgroups=2)},
            r"fwd_walk_warpgroups=2 splits N \(B.shape\[3\]\) into halves of a multiple of 64 columns, got N=64",
        ),
        (
            {"dstate": 256, "config": SsdConfig(fwd_mosaic=True, fwd_walk_warpgroups=2, fwd_walk_pieces=2)},
            "fwd_walk_warpgroups=2 loads B and C in halves itself: set fwd_walk_pieces=1, got 2",
        ),
        ({"checkpoint_every": 100}, "checkpoint_every must be None, 0 or a multiple of 64 > 0, got 100"),
        ({"checkpoint_every": 128, "config": SsdConfig()}, "pass either config or checkpoint_every"),
    ],
)
def test_pallas_refuses_what_it_does_not_tile(change, message):
    headdim, dstate = change.get("headdim", 16), change.get("dstate", 16)
    x = jnp.zeros((1, 8, 2, headdim))
    B = jnp.zeros((1, 8, 1, dstate))
    with pytest.raises(ValueError, match=message):
        mamba_chunk_scan_combined(
            x, jnp.zeros((1, 8, 2)), -jnp.ones(2), B, B, 64, impl="pallas", config=change.get("config"),
            checkpoint_every=change.get("checkpoint_every"),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("config", "kernels"),
    [
        (
            SsdConfig(fused_forward_max_l=0, checkpoint_every=1024, two_level_states=True),
            [
                *("ssd_fwd_segment_states", "ssd_fwd_segment_walk", "ssd_fwd_block_states", "ssd_fwd_out"),
                *("ssd_bwd_rebuild_states", "ssd_bwd_segment_dstates", "ssd_bwd_segment_walk"),
                *("ssd_bwd_block_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"),
            ],
        ),
        (
            SsdConfig(fused_forward_max_l=0, checkpoint_every=1024, two_level_states=True, fused_segments=True),
            [
                *("ssd_fwd_segment_states", "ssd_fwd_segment_walk", "ssd_fwd_fused_segments"),
                *("ssd_bwd_rebuild_states", "ssd_bwd_segment_dstates", "ssd_bwd_segment_walk"),
                *("ssd_bwd_block_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"),
            ],
        ),
        (
            SsdConfig(
                fused_forward_max_l=0,
                checkpoint_every=1024,
                two_level_states=True,
                fused_segments=True,
                two_level_backward=False,
            ),
            [
                *("ssd_fwd_segment_states", "ssd_fwd_segment_walk", "ssd_fwd_fused_segments"),
                *("ssd_bwd_rebuild_states", "ssd_bwd_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"),
            ],
        ),
        (
            SsdConfig(fused_forward_max_l=0, two_level_states=True),
            [
                *("ssd_fwd_segment_states", "ssd_fwd_segment_walk", "ssd_fwd_block_states", "ssd_fwd_out"),
                *("ssd_bwd_segment_dstates", "ssd_bwd_segment_walk", "ssd_bwd_block_dstates", "ssd_bwd_dx"),
                "ssd_bwd_dbc",
            ],
        ),
        (SsdConfig(), ["ssd_fwd_fused", "ssd_bwd_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"]),
        (SsdConfig(bwd_rowwise_dcs=True), ["ssd_fwd_fused", "ssd_bwd_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"]),
        (SsdConfig(bwd_state_chunk=32), ["ssd_fwd_fused", "ssd_bwd_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"]),
        (
            SsdConfig(fused_forward_max_l=0, persistent_programs=8, bwd_persistent_programs=8),
            ["ssd_fwd_states", "ssd_fwd_out_persistent", "ssd_bwd_dstates", "ssd_bwd_dx_persistent", "ssd_bwd_dbc"],
        ),
        # the per-head kernel on Mosaic GPU: gone from the Triton list, and lowered too (its register-layout inference
        # runs in Python, and interpret mode does not choose layouts)
        (MOSAIC_DX, ["ssd_fwd_fused", "ssd_bwd_dstates", "ssd_bwd_dbc"]),
        (MOSAIC, ["ssd_fwd_fused", "ssd_bwd_dstates"]),
        (MOSAIC_FORWARD, []),  # ... and the forward's walk and the state passes: no Triton kernel left
        (MOSAIC_SEGMENTS, ["ssd_fwd_segment_walk", "ssd_bwd_segment_walk"]),  # but the walks over segments
        (MOSAIC_SEGMENTS_KEPT, ["ssd_fwd_segment_walk", "ssd_bwd_segment_walk"]),
    ],
)
def test_kernels_lower_to_triton_for_an_h100(monkeypatch, config, kernels):
    """Interpret mode never lowers the kernels to Triton: this does, for an H100 (compare.triton_ir), so that a
    kernel Pallas's Triton lowering refuses fails here and not first on the GPU."""
    from compare.triton_ir import triton_modules
    from pallas_kernels.ssd import api

    monkeypatch.setattr(api, "interpret_mode", lambda: False)
    x = jax.ShapeDtypeStruct((1, 4096, 4, 64), jnp.bfloat16)
    dt = jax.ShapeDtypeStruct((1, 4096, 4), jnp.bfloat16)
    bc = jax.ShapeDtypeStruct((1, 4096, 2, 128), jnp.bfloat16)
    heads = jax.ShapeDtypeStruct((4,), jnp.float32)

    def forward_backward(*args):
        def forward(x, dt, A, B, C, D, z, bias):
            return mamba_chunk_scan_combined(
                x, dt, A, B, C, 256, D=D, z=z, dt_bias=bias, dt_softplus=True, impl="pallas", config=config
            )

        out, vjp = jax.vjp(forward, *args)
        return vjp(out)

    modules = triton_modules(forward_backward, x, dt, heads, bc, bc, heads, x, heads)
    assert [name for name, _ in modules] == kernels
    assert all("tt.func" in ir for _, ir in modules)


@pytest.mark.parametrize("calls", [2, 3])
def test_calls_of_one_shape_share_each_mosaic_gpu_kernel(monkeypatch, calls):
    """A model calls the SSD once a layer: those calls must lower (and so compile) each Mosaic GPU kernel once. Its
    module carries the call's source locations, so calls lowered apart are different kernels (``kernel_hash``):
    mamba2-130m's 24 layers then took minutes to compile. Lowered for a GPU with ``wgmma`` (an H100), forward and
    backward, every kernel on Mosaic GPU (``MOSAIC_FORWARD``); the calls differ in their inputs only."""
    import re

    from pallas_kernels.ssd import api

    monkeypatch.setattr(api, "interpret_mode", lambda: False)
    x = jax.ShapeDtypeStruct((1, 256, 2, 64), jnp.bfloat16)
    dt = jax.ShapeDtypeStruct((1, 256, 2), jnp.float32)
    bc = jax.ShapeDtypeStruct((1, 256, 1, 64), jnp.bfloat16)
    heads = jax.ShapeDtypeStruct((2,), jnp.float32)

    def kernels_of(n_calls: int) -> tuple[int, int]:
        def loss(x, dt, A, B, C, D):
            total = 0.0
            for i in range(n_calls):
                kwargs = dict(D=D, z=x, dt_bias=D, dt_softplus=True, impl="pallas", config=MOSAIC_FORWARD)
                out = mamba_chunk_scan_combined(x * (i + 1), dt, A, B, C, 64, **kwargs)
                total = total + out.astype(jnp.float32).sum()
            return total

        grad = jax.jit(jax.grad(loss, argnums=(0, 1, 3, 4)))
        text = grad.trace(x, dt, heads, bc, bc, heads).lower(lowering_platforms=("cuda",)).as_text()
        hashes = re.findall(r'kernel_hash = "(.*?)", module', text)
        return len(set(hashes)), len(hashes)

    distinct_one, _ = kernels_of(1)
    distinct, lowered = kernels_of(calls)
    assert distinct_one >= 3  # the forward's walk and the backward's kernels, at least
    assert distinct == distinct_one and lowered == distinct_one
