"""The Pallas SSD kernels in interpret mode (CPU): forward, final state and every gradient against the float64
oracle and the pure-JAX reference, on awkward shapes and tilings, with and without each optional input; the states
the forward keeps for the backward.

Interpret mode fills outputs with NaN before the kernel runs, so any element a kernel forgets to write fails."""

import functools
import os
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close, reference_noise_scale
from pallas_kernels import mamba_chunk_scan_combined
from pallas_kernels.ssd.config import SsdConfig
from tests.pallas_kernels.ssd.configs import (
    BWD_HEADDIM_SPLIT,
    FORWARD_TWO_LEVEL_ALL,
    FORWARD_TWO_LEVEL_KEPT,
    FUSED_SEGMENTS_ALL,
    FUSED_SEGMENTS_KEPT,
    FUSED_SEGMENTS_SHORT,
    KEPT_COLUMNS_SPLIT,
    MOSAIC,
    MOSAIC_64_COLUMNS,
    MOSAIC_DX,
    MOSAIC_FORWARD,
    MOSAIC_FORWARD_HALVES,
    MOSAIC_FORWARD_KEPT,
    MOSAIC_FORWARD_PIECES,
    MOSAIC_SEGMENTS_HALVES,
    MOSAIC_SEGMENTS_KEPT,
    MOSAIC_SEGMENTS_PIECES,
    ONE_DBC_PROGRAM,
    OWN_SCORES_BWD_SPLIT,
    OWN_SCORES_FUSED,
    OWN_SCORES_ROWWISE,
    OWN_SCORES_SHORT_BLOCKS,
    OWN_SCORES_SPLIT,
    ROWWISE,
    STATE_COLUMNS_SPLIT,
    TWO_LEVEL_ALL_SHORT,
    TWO_LEVEL_ALL_SPLIT,
    kept,
    split,
    two_level,
    two_level_keep_all,
)
from tests.pallas_kernels.test_ssd_reference import INF, make_inputs, oracle, oracle_with_spread, run_with_vjp

# dA, d dt_bias and dD (float32, one value per head) are sums over batch and L of products whose factors the kernels
# round to bf16/fp16 for the dots; their bound is 3x the dtype's. dA and d dt_bias sum per-position terms that can
# cancel to a small fraction of their size (a bf16 seed: dA 4% of the terms' absolute sum, off by 4.7% relative to
# itself, 1.5% relative to the terms' root-sum-square), so their error is relative to max(|sum|, that spread) (see
# oracle_with_spread); dD sums exact products in float32 and stays relative to itself.
REDUCED_GRADS = ("A", "dt_bias", "D")
REDUCED_GRAD_SCALE = 3.0

CASES = [  # batch, L, H, P, N, G, chunk, dtype, D, z, init, seq_idx, softplus, dt_limit, config
    (2, 1, 4, 16, 16, 1, 64, jnp.float32, "H", True, True, False, True, (0.0, INF), SsdConfig(block_l=16)),
    (1, 100, 4, 20, 12, 2, 64, jnp.float32, "HP", False, False, True, True, (0.0, INF), split(block_l=32)),
    (2, 256, 2, 32, 16, 1, 128, jnp.float32, None, True, True, True, True, (0.01, 0.3), SsdConfig(block_l=64)),
    (1, 1000, 2, 16, 24, 1, 256, jnp.float32, "H", True, True, True, True, (0.0, INF), split()),
    # the sequential passes on 16 of N = 40 state columns per program (3 column blocks, the last one partial)
    (1, 97, 6, 16, 40, 3, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), STATE_COLUMNS_SPLIT),
    # the split forward's output pass over 3 head-dim blocks (float32, no seq_idx)
    (2, 100, 4, 48, 16, 2, 64, jnp.float32, "HP", True, True, False, True, (0.0, INF), split(block_l=16, block_p=16)),
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
    # split forward in blocks of 16 (fp16, L 37), one position (in float32: in bf16 at one position dA and ddt are
    # sums that cancel, and 8 of 60 seeds missed the oracle by 1-22% where the float32-internal reference did not)
    (2, 100, 4, 48, 16, 2, 64, jnp.bfloat16, "HP", True, True, True, True, (0.0, INF), OWN_SCORES_FUSED),
    (1, 130, 6, 16, 24, 3, 128, jnp.float32, "H", True, True, True, True, (0.0, INF), OWN_SCORES_SPLIT),
    (2, 37, 4, 16, 16, 2, 64, jnp.float16, "H", True, False, False, True, (0.0, INF), OWN_SCORES_SHORT_BLOCKS),
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
    # kept states (bf16, 3 groups), own C·Bᵀ (fp16), dt_limit (bf16), one position
    (1, 100, 4, 32, 16, 2, 64, jnp.float32, "HP", True, True, True, True, (0.0, INF), split(bwd_block_p=16, **ROWWISE)),
    (2, 100, 6, 16, 24, 3, 64, jnp.bfloat16, "H", True, True, True, True, (0.0, INF), kept(48, **ROWWISE)),
    (2, 37, 4, 16, 16, 2, 64, jnp.float16, "H", True, False, False, True, (0.0, INF), OWN_SCORES_ROWWISE),
    (1, 256, 8, 16, 32, 2, 256, jnp.bfloat16, "HP", True, True, True, True, (0.0, 0.05), SsdConfig(**ROWWISE)),
    (1, 1, 2, 16, 16, 1, 64, jnp.float32, "H", False, True, False, True, (0.0, INF), SsdConfig(block_l=16, **ROWWISE)),
    # own C·Bᵀ at N 40 with the backward's heads in 2 head-dim parts (float32, 4 groups)
    (1, 130, 4, 32, 40, 4, 64, jnp.float32, "H", True, True, False, True, (0.0, INF), OWN_SCORES_BWD_SPLIT),
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
    # at N 256, no D, no softplus), per segment (3 blocks in segments of 2 and 1: the last walk shorter, both ways;
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
        *(1, 192, 2, 128, 128, 1, 64, jnp.float16, "H", False, True, False, True, (0.0, 0.05), MOSAIC_SEGMENTS_PIECES),
        id="mosaic-segments",
    ),
    pytest.param(
        *(1, 256, 2, 64, 256, 1, 64, jnp.bfloat16, "HP", True, True, False, True, (0.0, INF), MOSAIC_FORWARD_HALVES),
        id="mosaic-forward-halves",
    ),
    pytest.param(
        *(1, 192, 2, 128, 128, 1, 64, jnp.float16, "H", False, True, False, True, (0.0, 0.05), MOSAIC_SEGMENTS_HALVES),
        id="mosaic-segments-halves",
    ),
    pytest.param(
        *(1, 192, 4, 64, 64, 2, 64, jnp.bfloat16, "HP", True, True, False, True, (0.0, INF), MOSAIC_SEGMENTS_KEPT),
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


@functools.cache
def inputs_and_expected(*params):
    """Random inputs and cotangents with the pure-JAX reference's and the float64 oracle's results on them, once for
    all the cases (tilings) that share these inputs: drawn from the session seed and ``params``, the case's
    (batch, L, H, P, N, G, chunk, dtype, D, z, init, seq_idx, softplus, dt_limit)."""
    batch, seqlen, nheads, headdim, dstate, groups, chunk, dtype, D, z, init, seq, softplus, dt_limit = params
    named = repr([jnp.dtype(p).name if p is dtype else p for p in params]).encode()
    rng = np.random.default_rng([int(os.environ["TEST_SEED"]), zlib.crc32(named)])
    arrays, exact, seq_idx = make_inputs(
        rng, batch, seqlen, nheads, headdim, dstate, groups, dtype, D=D, z=z, init=init, seq=seq, softplus=softplus
    )
    dout = jnp.asarray(rng.normal(size=(batch, seqlen, nheads, headdim)), dtype)
    dfinal = jnp.asarray(rng.normal(size=(batch, nheads, headdim, dstate)), jnp.float32)
    reference = run_with_vjp(arrays, seq_idx, chunk, softplus, dt_limit, dout, dfinal)
    as64 = lambda t: np.asarray(t.astype(jnp.float32), np.float64)  # noqa: E731
    expected = oracle_with_spread(exact, seq_idx, softplus, dt_limit, as64(dout), as64(dfinal))
    return (arrays, seq_idx, dout, dfinal), reference, expected


@pytest.fixture(scope="module", autouse=True)
def _release_shared_inputs():
    """The shared inputs live while this file runs, not through the later files of its process."""
    yield
    inputs_and_expected.cache_clear()


@pytest.mark.parametrize(
    "batch,seqlen,nheads,headdim,dstate,groups,chunk,dtype,D,z,init,seq,softplus,dt_limit,config", CASES
)
def test_pallas_matches_oracle_and_reference(
    batch, seqlen, nheads, headdim, dstate, groups, chunk, dtype, D, z, init, seq, softplus, dt_limit, config
):
    (arrays, seq_idx, dout, dfinal), reference, expected = inputs_and_expected(
        batch, seqlen, nheads, headdim, dstate, groups, chunk, dtype, D, z, init, seq, softplus, dt_limit
    )
    out, final, grads = run_with_vjp(
        arrays, seq_idx, chunk, softplus, dt_limit, dout, dfinal, impl="pallas", config=config
    )
    ref_out, ref_final, ref_grads = reference
    want_out, want_final, want_grads, spread = expected

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
    from pallas_kernels._mosaic_gpu import sigmoid

    z = np.concatenate([np.linspace(-120.0, 120.0, 4801), [0.0, -88.5, 88.5, -1e30, 1e30]]).astype(np.float32)
    got = np.asarray(jax.jit(sigmoid)(jnp.asarray(z)))
    with np.errstate(over="ignore"):  # exp(1e30) is inf in float64 too: the logistic function's 0
        want = 1.0 / (1.0 + np.exp(-z.astype(np.float64)))
    assert got.dtype == np.float32 and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-37)
    assert got[-2] == 0.0 and got[-1] == 1.0


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
