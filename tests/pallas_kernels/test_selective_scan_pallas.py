"""Pallas selective scan in interpret mode (CPU): forward, last state and every gradient against the float64
oracle and the forward against the pure-JAX reference, over awkward shapes and tilings.

Interpret mode fills every output buffer with NaN before the kernel runs, so an element a kernel fails to write
fails the finiteness check in ``assert_close``.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import selective_scan_fn
from pallas_kernels.selective_scan.config import ScanConfig
from pallas_kernels.selective_scan.dispatch import _tma_keep, _tma_rows
from pallas_kernels.selective_scan.heuristics import (
    default_config,
    mosaic_backward_resident,
    mosaic_segments,
    segment_length,
    sequential_bwd_unroll,
)
from pallas_kernels.selective_scan.mosaic_gpu.common import KEEP_LANES, TMA_SLOT_BYTES, check_tma_slots
from tests.pallas_kernels.one_program import forward_and_backward
from tests.pallas_kernels.test_selective_scan_reference import (
    assert_matches_oracle,
    assert_packed_matches_separate_runs,
    make_inputs,
    oracle,
)

SMALL = ScanConfig(block_d=4, chunk=4, prefetch=3, bwd_unroll=2, bwd_block_d=8)  # several channel blocks
LONG = ScanConfig(block_d=2, chunk=8, prefetch=11, bwd_unroll=4, bwd_block_d=2, bwd_prefetch=5)  # loads far ahead
# The chunked design: several segments, chunks and channel blocks; a tile wider than a warp; mixed with the other
CHUNKED = ScanConfig(design="chunked", bwd_design="chunked", block_d=4, rows=4, bwd_rows=8, bwd_block_d=2, segments=3)
WIDE = ScanConfig(design="chunked", bwd_design="chunked", block_d=2, rows=8, num_warps=2, bwd_rows=16, bwd_block_d=4)
CHUNKED_FWD = ScanConfig(design="chunked", block_d=4, rows=16, chunk=4, segments=2)  # states saved inside chunks
CHUNKED_BWD = ScanConfig(bwd_design="chunked", chunk=4, bwd_unroll=2, bwd_rows=4, bwd_block_d=8)
# States kept every checkpoint_every steps only, the rest rebuilt in the backward: under either backward
KEPT = ScanConfig(
    design="chunked",
    bwd_design="chunked",
    block_d=4,
    rows=4,
    bwd_rows=4,
    bwd_block_d=4,
    segments=2,
    checkpoint_every=16,
)
KEPT_SEQUENTIAL = ScanConfig(design="chunked", block_d=2, rows=8, chunk=4, bwd_block_d=4, checkpoint_every=32)
# The Mosaic GPU forward (128 channels a program) before each backward: states kept every 16 steps (its blocks of
# 16), every 4 (blocks of 4, the sequential backward's chunk) and every 32 (its full blocks)
MOSAIC_KEPT = dataclasses.replace(KEPT, fwd_backend="mosaic_gpu")
MOSAIC_SEQUENTIAL = ScanConfig(fwd_backend="mosaic_gpu", chunk=4, bwd_unroll=2, bwd_block_d=8)
MOSAIC_KEPT_SEQUENTIAL = dataclasses.replace(KEPT_SEQUENTIAL, fwd_backend="mosaic_gpu")
# The Mosaic GPU backward (blocks of ``chunk`` steps, 128 channels a program): after the Mosaic GPU forward keeping
# every block's start state, after it keeping every 16th step's (the rest rebuilt on Mosaic GPU), after the Triton
# forward
MOSAIC_BWD = ScanConfig(fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", chunk=8)
MOSAIC_BWD_KEPT = ScanConfig(fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", chunk=4, checkpoint_every=16)
TRITON_FWD_MOSAIC_BWD = ScanConfig(design="chunked", block_d=4, rows=8, chunk=8, bwd_backend="mosaic_gpu")
# Both Mosaic GPU passes over segments of L walked in parallel from their composed boundary values
MOSAIC_SEGMENTS = ScanConfig(fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", chunk=4, segments=3)
MOSAIC_TWO_SEGMENTS = dataclasses.replace(MOSAIC_SEGMENTS, chunk=8, segments=2)

CASES = [  # batch, L, dim, N, G, dtype, D, z, delta_bias, softplus, config
    (2, 1, 8, 4, 1, jnp.float32, True, True, True, True, SMALL),
    (1, 7, 6, 1, 2, jnp.float32, False, False, False, False, SMALL),
    (2, 7, 8, 16, 2, jnp.bfloat16, True, True, True, True, LONG),
    (2, 64, 8, 16, 2, jnp.float32, True, False, True, True, SMALL),
    (1, 64, 12, 4, 1, jnp.bfloat16, False, True, False, True, LONG),
    (2, 129, 12, 4, 1, jnp.float32, False, True, False, False, LONG),
    (1, 129, 8, 1, 2, jnp.bfloat16, True, True, True, True, SMALL),
    (3, 33, 12, 16, 3, jnp.float16, True, True, True, True, SMALL),
    # 3 chunks and a partial one: chunks of 16 reversed 8 steps at a time; LONG's loads 11 steps ahead over 5 chunks
    (1, 51, 4, 16, 1, jnp.bfloat16, True, True, True, True, ScanConfig(chunk=16, bwd_unroll=8)),
    (1, 43, 6, 4, 2, jnp.float32, True, False, False, True, LONG),
    (2, 100, 16, 16, 1, jnp.bfloat16, True, True, True, True, None),  # the default tiling
    (1, 9, 4, 40, 2, jnp.float32, True, True, True, True, None),  # N padded to 64 inside the kernels
    (1, 5, 2, 256, 1, jnp.float32, True, False, True, True, None),  # the largest N
    (2, 1, 8, 4, 1, jnp.float32, True, True, True, True, CHUNKED),
    (1, 7, 6, 1, 2, jnp.float32, False, False, False, False, CHUNKED),
    (2, 37, 8, 16, 2, jnp.bfloat16, True, True, True, True, CHUNKED),
    (3, 33, 12, 16, 3, jnp.float16, True, True, True, True, WIDE),
    (1, 129, 8, 4, 1, jnp.float32, True, False, True, True, CHUNKED_FWD),
    (2, 64, 8, 16, 2, jnp.float32, True, True, False, True, CHUNKED_BWD),
    (1, 9, 4, 40, 2, jnp.float32, True, True, True, True, CHUNKED),  # N padded to 64
    (1, 21, 2, 256, 1, jnp.float32, True, True, False, False, CHUNKED),  # the largest N; dt >= 0 without softplus
    (2, 77, 12, 4, 3, jnp.bfloat16, True, True, True, True, KEPT),
    (1, 129, 8, 16, 1, jnp.float32, True, True, True, True, KEPT_SEQUENTIAL),
    (2, 5, 4, 16, 1, jnp.float32, True, False, True, True, KEPT_SEQUENTIAL),  # L shorter than the interval
    (2, 1, 128, 4, 1, jnp.float32, True, True, True, True, MOSAIC_KEPT),
    (1, 45, 256, 8, 2, jnp.bfloat16, True, True, True, True, MOSAIC_KEPT),  # a partial block, two groups
    (2, 37, 128, 16, 1, jnp.float32, False, False, False, False, MOSAIC_SEQUENTIAL),
    (1, 70, 128, 8, 1, jnp.float16, True, False, True, True, MOSAIC_KEPT_SEQUENTIAL),
    (2, 1, 128, 4, 1, jnp.float32, True, True, True, True, MOSAIC_BWD),
    (1, 33, 256, 12, 2, jnp.bfloat16, True, True, True, True, MOSAIC_BWD_KEPT),  # a partial block, 12 states a round
    (2, 37, 128, 16, 1, jnp.float32, False, False, False, False, TRITON_FWD_MOSAIC_BWD),  # two rounds of 8 states
    (1, 40, 384, 4, 3, jnp.float16, True, False, True, True, MOSAIC_BWD),  # three groups, B and C's rows of 8 bytes
    (2, 17, 128, 8, 1, jnp.bfloat16, False, True, False, True, MOSAIC_BWD),
    (1, 45, 128, 8, 1, jnp.float32, True, True, True, True, MOSAIC_SEGMENTS),  # 3 segments of 16 steps
    (1, 50, 256, 4, 2, jnp.bfloat16, False, True, False, True, MOSAIC_SEGMENTS),  # 3 of 20, the last partial
    (1, 33, 128, 16, 1, jnp.float32, True, False, True, True, MOSAIC_TWO_SEGMENTS),  # blocks wholly past L
    (1, 19, 128, 5, 1, jnp.bfloat16, True, True, True, True, MOSAIC_BWD),  # odd N: B and C widened to 8 in float32
    (2, 21, 256, 3, 2, jnp.float32, False, True, True, True, MOSAIC_SEGMENTS),  # 3 states, blocks of 4: sum rows padded
    (1, 10, 128, 1, 1, jnp.float32, True, False, False, True, MOSAIC_BWD_KEPT),  # one state
]


def _run(arrays, softplus, config, impl="pallas"):
    names = [k for k, v in arrays.items() if v is not None]

    def run(*xs):
        kw = dict(zip(names, xs, strict=True))
        return selective_scan_fn(**kw, delta_softplus=softplus, return_last_state=True, impl=impl, config=config)

    return names, run


@pytest.mark.parametrize("batch,seqlen,dim,dstate,groups,dtype,has_D,has_z,has_bias,softplus,config", CASES)
def test_forward_and_gradients_match_oracle_and_reference(
    rng, batch, seqlen, dim, dstate, groups, dtype, has_D, has_z, has_bias, softplus, config
):
    arrays, exact = make_inputs(
        rng, batch, seqlen, dim, dstate, groups, dtype, D=has_D, z=has_z, bias=has_bias, softplus=softplus
    )
    out, last = assert_matches_oracle(rng, arrays, exact, softplus, impl="pallas", config=config)
    names, reference = _run(arrays, softplus, None, impl="reference")
    ref_out, ref_last = jax.jit(reference)(*[arrays[k] for k in names])
    assert_close("out vs reference", out, ref_out.astype(jnp.float32), dtype)
    assert_close("last_state vs reference", last, ref_last, jnp.float32)


@pytest.mark.parametrize(
    "batch,seqlen,dim,dstate,dtype,config",
    [
        (2, 30, 128, 8, jnp.float32, MOSAIC_SEGMENTS),  # sequences across and inside 3 segments
        (1, 33, 256, 4, jnp.bfloat16, MOSAIC_BWD_KEPT),  # states rebuilt from every 16th, two groups
    ],
    ids=["segments", "kept"],
)
def test_packed_sequences_on_mosaic_gpu_run_as_if_alone(rng, batch, seqlen, dim, dstate, dtype, config):
    groups = dim // 128
    arrays, exact = make_inputs(rng, batch, seqlen, dim, dstate, groups, dtype)
    assert_packed_matches_separate_runs(rng, arrays, exact, True, impl="pallas", config=config)


@pytest.mark.parametrize("config", [SMALL, CHUNKED, KEPT], ids=["sequential", "chunked", "kept"])
def test_gradient_through_last_state_only(rng, config):
    """A loss on the last state alone (dout = 0) still reaches every input through the adjoint recurrence."""
    arrays, exact = make_inputs(rng, 2, 21, 8, 4, 2, jnp.float32)
    names, run = _run(arrays, True, config)
    primals = [arrays[k] for k in names]
    out, last = jax.eval_shape(run, *primals)
    dlast = jnp.asarray(rng.normal(size=last.shape), jnp.float32)
    _, grads = forward_and_backward(run, primals, (jnp.zeros(out.shape, out.dtype), dlast))
    grads = dict(zip(names, grads, strict=True))
    _, _, want = oracle(exact, True, np.zeros(out.shape), np.asarray(dlast, np.float64))
    for name in ("u", "delta", "A", "B", "delta_bias"):
        assert_close(f"d{name}", grads[name], want[name], jnp.float32)
    assert not np.any(np.asarray(grads["C"])), "C only reads the state: no gradient without dout"


@pytest.mark.parametrize("config", [SMALL, CHUNKED], ids=["sequential", "chunked"])
def test_channels_first_layout(rng, config):
    arrays, exact = make_inputs(rng, 2, 19, 8, 4, 1, jnp.float32)
    cf = {k: jnp.swapaxes(arrays[k], 1, 2) for k in ("u", "delta", "z")}
    bc = {k: jnp.transpose(arrays[k], (0, 2, 3, 1)) for k in ("B", "C")}
    args = (cf["u"], cf["delta"], arrays["A"], bc["B"], bc["C"], arrays["D"], cf["z"], arrays["delta_bias"], True)
    out = selective_scan_fn(*args, layout="channels_first", impl="pallas", config=config)
    want, _, _ = oracle(exact, True)
    assert_close("out", jnp.swapaxes(out, 1, 2), want, jnp.float32)


def test_backend_chooses_the_default_configs_kernels(rng):
    """``backend="mosaic_gpu"``: the default tiling with both passes on Mosaic GPU (the kernels' names in the program;
    values against the oracle); "auto" keeps Triton when interpreted, as in these tests; "triton" is the default."""
    arrays, exact = make_inputs(rng, 1, 20, 128, 8, 1, jnp.float32)
    names = [k for k, v in arrays.items() if v is not None]

    def program(backend: str) -> str:
        fn = lambda *xs: selective_scan_fn(**dict(zip(names, xs, strict=True)), impl="pallas", backend=backend)  # noqa: E731
        return str(jax.make_jaxpr(jax.grad(lambda *xs: fn(*xs).sum(), argnums=(0, 1)))(*[arrays[k] for k in names]))

    mosaic, auto, triton = (program(b) for b in ("mosaic_gpu", "auto", "triton"))
    assert "selective_scan_fwd_chunked" not in mosaic and "name=selective_scan_fwd " in mosaic.replace("\n", " ")
    assert "selective_scan_fwd_chunked" in auto and auto == triton
    assert_matches_oracle(rng, arrays, exact, True, impl="pallas", backend="mosaic_gpu")


def test_mosaic_segments_give_the_fewest_wave_steps_with_long_enough_walks():
    """The count of segments (each at least 256 steps) whose waves of 2 programs an SM on 132 SMs walk the fewest
    steps, the fewest segments within 5% of that."""
    assert mosaic_segments(96, 2048) == 8  # 130m: 768 programs, 3 waves of 256 steps (4 segments: 2 waves of 512)
    assert mosaic_segments(96, 2048, resident=1) == 4  # 3 waves of 512 steps (8 segments: 6 of 256, the same)
    assert mosaic_segments(12, 16384) == 21  # long: 252 programs in one wave of 781 steps (22: 745, within 5%)
    assert mosaic_segments(96, 4096) == 8  # 3 waves of 512 (11 segments: 4 of 373, 3% fewer steps)
    assert mosaic_segments(12, 300) == 1  # too short to split
    assert mosaic_segments(1, 1024) == 4  # as many 256-step segments as L holds
    assert mosaic_segments(1024, 8192) == 1  # 2.7b-class batch: more segments only divide the same waves' steps
    assert mosaic_segments(12, 16384, sm_count=24) == 4  # 48 programs fill 24 SMs twice: one wave
    assert mosaic_segments(12, 16384, sm_count=32) == 16  # 3 waves of 1024 steps; 5 segments: 1 of 3277


def test_mosaic_backward_residency_falls_to_one_where_its_shared_memory_does_not_fit_two():
    assert [mosaic_backward_resident(n) for n in (1, 8, 16, 23)] == [2] * 4
    assert [mosaic_backward_resident(n) for n in (24, 32, 64)] == [1] * 3


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
@pytest.mark.parametrize("block_l", [4, 8, 16, 32])
def test_mosaic_b_and_c_blocks_fill_whole_tma_slots(rng, dtype, block_l):
    """Every N the Mosaic GPU kernels take: B's and C's blocks of ``block_l`` steps fill 128-byte slots, their rows
    16 bytes, and the first N columns are B itself (the padding zeros)."""
    for dstate in (4, 8, 12, 16, 20, 32, 64):
        x = jnp.asarray(rng.normal(size=(2, 3, 2, dstate)), dtype)
        (taken,) = _tma_rows(block_l, x)
        row = taken.shape[-1] * taken.dtype.itemsize
        assert row % 16 == 0 and block_l * row % TMA_SLOT_BYTES == 0, (dstate, taken.shape, taken.dtype)
        np.testing.assert_array_equal(np.asarray(taken[..., :dstate], np.float32), np.asarray(x, np.float32))
        assert not np.asarray(taken[..., dstate:]).any()
        if dtype == jnp.bfloat16 and dstate % 16 == 0:
            assert taken is x  # the common case copies nothing


def test_a_tma_slot_off_128_bytes_is_refused_while_tracing():
    """The keep mask's blocks of 8 float32 steps (32 bytes) put the second slot's TMA copy off a 128-byte boundary:
    a CUDA_ERROR_MISALIGNED_ADDRESS on an H100, nothing in interpret mode. The check names it before any kernel."""
    keep = jax.ShapeDtypeStruct((301,), jnp.float32)
    with pytest.raises(ValueError, match=r"slot of \(8,\) float32 fills 32 bytes, not a multiple of 128"):
        check_tma_slots([keep], [(8,)])
    check_tma_slots([keep], [(32,)])
    wide = _tma_keep(jnp.ones((2, 301), jnp.float32))
    assert wide.shape == (2, 301, KEEP_LANES)
    for block_l in (4, 8, 16, 32):
        check_tma_slots([wide], [(block_l, KEEP_LANES)])


def test_default_config_tiles_small_and_large_states():
    wide = default_config(16, 1536, 8)  # the 130m layer, batch 8: chunked forward, sequential backward
    assert (wide.design, wide.rows, wide.block_d, wide.num_warps) == ("chunked", 16, 8, 1)
    assert (wide.bwd_design, wide.chunk, wide.bwd_block_d) == ("sequential", 8, 8)
    assert (wide.kept_every, wide.save_every, wide.rebuilds_states) == (256, 8, True)  # 1/32 of the states kept
    every = default_config(16, 1536, 8, checkpoint_every=0)  # keep every state the backward reads: no rebuild
    assert (every.kept_every, every.rebuilds_states) == (8, False)
    narrow = default_config(16, 1536, 1)  # batch 1: too few programs for the sequential backward
    assert (narrow.rows, narrow.bwd_design, narrow.bwd_rows, narrow.bwd_block_d, narrow.bwd_num_warps) == (
        8,
        "chunked",
        8,
        8,
        2,
    )
    big = default_config(256, 1536, 8)
    assert (big.block_d, big.num_warps) == (1, 2)  # 16 x 256 x 1 elements: two warps
    assert default_config(4, 3, 64).block_d <= 4  # never wider than the group (rounded up to a power of two)
    for config in (wide, narrow, big):
        config.validate()


def test_the_sequential_backward_unrolls_further_where_that_adds_no_wave_of_programs():
    """4 steps reversed together where the programs' larger register file (8 resident per SM, not 12) does not add a
    wave of programs; measured on an H100 at nine shapes (docs/kernels.md#selective-scan-default-config)."""
    cases = {  # (dim, batch x groups) -> programs of 8 channels -> bwd_unroll on 132 SMs
        (2048, 8): 4,  # 370m layer: 2048 programs, 2 waves either way
        (4096, 4): 4,  # 1.4b layer
        (2048, 4): 4,  # 1024 programs: one wave either way
        (1536, 8): 2,  # 130m layer: 1536 programs, 1 wave at 12 per SM, 2 at 8
        (384, 32): 2,  # 4 groups of 384 channels, batch 8
        (2560, 8): 2,  # 2560 programs: 2 waves against 3
        (768, 32): 2,
    }
    for (dim, programs_per_channel), unroll in cases.items():
        config = default_config(16, dim, programs_per_channel)
        assert (config.bwd_design, config.bwd_unroll) == ("sequential", unroll), (dim, programs_per_channel)
        config.validate()
    assert default_config(16, 1536, 8, sm_count=200).bwd_unroll == 4  # a larger GPU holds them in one wave
    assert sequential_bwd_unroll(1584) == 2 and sequential_bwd_unroll(1056) == 4


def test_segments_fill_the_gpu_only_when_the_batch_does_not():
    config = default_config(16, 1536, 1)
    assert segment_length(config, 16384, 8 * 192) == 16384  # enough programs: one segment
    assert segment_length(config, 16384, 192) == 1496  # 11 segments of whole chunks
    assert segment_length(config, 5, 1) == 8  # never shorter than a chunk
    assert segment_length(dataclasses.replace(config, segments=4), 100, 10**6) == 32


def test_unsupported_inputs_are_refused_before_work(rng):
    arrays, _ = make_inputs(rng, 1, 5, 4, 4, 1, jnp.float32)
    u, delta, A, B, C = (arrays[k] for k in ("u", "delta", "A", "B", "C"))
    with pytest.raises(ValueError, match=r"input-dependent B .*\(dim, N\).*impl='reference'"):
        selective_scan_fn(u, delta, A, jnp.ones((4, 4)), C, impl="pallas")
    wide = jnp.zeros((4, 300), jnp.float32)
    with pytest.raises(ValueError, match=r"N .* up to 256, got 300"):
        selective_scan_fn(u, delta, wide, jnp.zeros((1, 5, 300)), jnp.zeros((1, 5, 300)), impl="pallas")
    with pytest.raises(ValueError, match="block_d must be a positive power of two, got 3"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=ScanConfig(block_d=3))
    with pytest.raises(ValueError, match="design must be one of"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=ScanConfig(design="parallel"))
    with pytest.raises(ValueError, match="bwd_rows=8 must equal chunk=4 after a sequential forward"):
        selective_scan_fn(
            u, delta, A, B, C, impl="pallas", config=ScanConfig(bwd_design="chunked", bwd_rows=8, chunk=4)
        )
    with pytest.raises(ValueError, match="checkpoint_every=8 must be a multiple of rows=16"):
        selective_scan_fn(
            u, delta, A, B, C, impl="pallas", config=ScanConfig(design="chunked", rows=16, checkpoint_every=8)
        )
    with pytest.raises(ValueError, match="checkpoint_every needs design='chunked'"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=ScanConfig(checkpoint_every=64))
    with pytest.raises(ValueError, match="checkpoint_every must be 0 or a positive power of two, got 48"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=ScanConfig(design="chunked", checkpoint_every=48))
    with pytest.raises(ValueError, match="pass either config or checkpoint_every"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=ScanConfig(), checkpoint_every=0)
    with pytest.raises(ValueError, match="checkpoint_every must be 0 or a positive power of two, got 48"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", checkpoint_every=48)
    with pytest.raises(ValueError, match="config must be an instance of ScanConfig"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config={"block_d": 4})
    with pytest.raises(ValueError, match="fwd_backend must be one of"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=ScanConfig(fwd_backend="cuda"))
    mosaic = ScanConfig(fwd_backend="mosaic_gpu")
    with pytest.raises(ValueError, match=r"fwd_backend='mosaic_gpu'\): channels per group \(dim / G = 4\) must be"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=mosaic)
    both = ScanConfig(fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu")
    with pytest.raises(ValueError, match=r"ScanConfig\(fwd_backend, bwd_backend='mosaic_gpu'\): channels per group"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=both)
    with pytest.raises(ValueError, match=r"backend must be one of \('triton', 'mosaic_gpu', 'auto'\), got 'cuda'"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", backend="cuda")
    with pytest.raises(ValueError, match="pass either config or backend"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=ScanConfig(), backend="mosaic_gpu")
    with pytest.raises(ValueError, match=r"fwd_backend, bwd_backend='mosaic_gpu'\): channels per group"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", backend="mosaic_gpu")
    packed = jnp.zeros((1, 5), jnp.int32)
    with pytest.raises(
        ValueError, match=r"seq_idx \(packed sequences\) with impl='pallas' runs on the Mosaic GPU kernels"
    ):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", seq_idx=packed)
    with pytest.raises(ValueError, match=r"seq_idx must have shape \(batch, L\)"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", seq_idx=packed[:, :3])
    with pytest.raises(ValueError, match="bwd_backend must be one of"):
        selective_scan_fn(u, delta, A, B, C, impl="pallas", config=ScanConfig(bwd_backend="cuda"))
    for chunk in (2, 64):
        with pytest.raises(ValueError, match=rf"chunk={chunk} \(the Mosaic GPU backward's block\) must be from 4 to"):
            selective_scan_fn(
                u, delta, A, B, C, impl="pallas", config=ScanConfig(bwd_backend="mosaic_gpu", chunk=chunk)
            )


@pytest.mark.parametrize(
    "shape,dtype",
    [((2, 37, 1, 40, 16), jnp.float32), ((1, 1, 3, 5, 7), jnp.bfloat16), ((3, 11, 2, 17, 1), jnp.float16)],
)
def test_block_partials_sum_to_the_exact_total(rng, shape, dtype):
    """The dB/dC partials' sum kernel: rows not a multiple of its row tile, more blocks than one load takes (40 >
    16) and fewer, N not a power of two; the float64 sum rounded once to the output dtype."""
    from pallas_kernels.selective_scan.triton.block_sums import sum_block_partials

    dB, dC = (jnp.asarray(rng.normal(size=shape), jnp.float32) for _ in range(2))
    got_b, got_c = sum_block_partials(dB, dC, dtype, interpret=True)
    for name, got, partials in (("dB", got_b, dB), ("dC", got_c, dC)):
        assert got.shape == shape[:3] + shape[4:] and got.dtype == dtype
        assert_close(name, got, np.asarray(partials, np.float64).sum(axis=3), dtype)
