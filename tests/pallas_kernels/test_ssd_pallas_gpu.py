"""On a GPU (marked ``gpu``): the compiled Pallas SSD kernels on awkward shapes against the float64 oracle, and at
the mamba2-130m shape in bf16, forward and every gradient, against the pure-JAX reference and mamba-ssm's
``mamba_chunk_scan_combined`` (its Triton kernels) on the same values."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.kernels.ops import OPS
from compare.parity.tolerances import assert_close
from pallas_kernels import mamba_chunk_scan_combined
from pallas_kernels.ssd.config import SsdConfig
from tests.pallas_kernels.gpu_checks import assert_matches_reference_and_mamba_ssm
from tests.pallas_kernels.ssd import configs
from tests.pallas_kernels.ssd import test_kernels as cpu

pytestmark = pytest.mark.gpu


KEPT = SsdConfig(checkpoint_every=128)  # states kept every 2 blocks of 64, the rest rebuilt
TWO_LEVEL = SsdConfig(checkpoint_every=128, two_level_states=True)  # state passes over segments of 2 blocks
TWO_LEVEL_ALL = SsdConfig(fused_forward_max_l=0, state_segment=128, two_level_states=True)  # ... every state kept
FUSED_SEGMENTS = SsdConfig(checkpoint_every=128, two_level_states=True, fused_segments=True)  # outputs per segment
FUSED_SEGMENTS_ALL = SsdConfig(fused_forward_max_l=0, state_segment=128, two_level_states=True, fused_segments=True)
FORWARD_TWO_LEVEL = dataclasses.replace(FUSED_SEGMENTS, two_level_backward=False)  # the backward's passes one-level
ROWWISE = SsdConfig(bwd_rowwise_dcs=True)  # the backward's d cs from row sums
MOSAIC_DX = SsdConfig(bwd_dx_mosaic=True)  # the backward's per-head kernel on Mosaic GPU
MOSAIC = SsdConfig(bwd_dx_mosaic=True, bwd_dbc_mosaic=True)  # ... and its dB/dC kernel (128 of N's columns a program)
MOSAIC_64_COLUMNS = dataclasses.replace(MOSAIC, bwd_dbc_columns=64)
MOSAIC_FORWARD = configs.MOSAIC_FORWARD  # ... and the forward's walk, whole
MOSAIC_FORWARD_ONE_STAGE = configs.MOSAIC_FORWARD_ONE_STAGE  # ... on one pipeline stage
MOSAIC_SEGMENTS = configs.MOSAIC_SEGMENTS  # ... per segment of 2 blocks, every block's state stored
MOSAIC_SEGMENTS_KEPT = configs.MOSAIC_SEGMENTS_KEPT  # ... float32 states kept every 2 blocks, one stage
MOSAIC_FORWARD_KEPT = configs.MOSAIC_FORWARD_KEPT  # ... a whole walk keeping them: run per segment of 2 blocks
MOSAIC_FORWARD_PIECES = configs.MOSAIC_FORWARD_PIECES  # ... whole, B and C in two pieces of N's columns
MOSAIC_SEGMENTS_PIECES = configs.MOSAIC_SEGMENTS_PIECES  # ... per segment of 2 blocks, in two pieces
MOSAIC_SEGMENTS_FOUR_PIECES = dataclasses.replace(MOSAIC_SEGMENTS_PIECES, fwd_walk_pieces=4)
MOSAIC_FORWARD_HALVES = configs.MOSAIC_FORWARD_HALVES  # ... whole, the state in halves of N on two warpgroups
MOSAIC_SEGMENTS_HALVES = configs.MOSAIC_SEGMENTS_HALVES  # ... per segment of 2 blocks, in halves
MOSAIC_LONG_SEGMENTS_HALVES = dataclasses.replace(MOSAIC_SEGMENTS_HALVES, state_segment=256)  # ... of 4 blocks
MOSAIC_FORWARD_HALVES_KEPT = dataclasses.replace(MOSAIC_FORWARD_HALVES, checkpoint_every=128)  # ... keeping states


@pytest.mark.parametrize(
    "dtype,seq,config",
    [
        (jnp.bfloat16, True, None),
        (jnp.float32, False, None),
        (jnp.bfloat16, True, KEPT),
        (jnp.float32, True, TWO_LEVEL),
        (jnp.bfloat16, True, TWO_LEVEL_ALL),
        (jnp.float32, True, FUSED_SEGMENTS),
        (jnp.bfloat16, True, FUSED_SEGMENTS_ALL),
        (jnp.bfloat16, True, FORWARD_TWO_LEVEL),
        (jnp.bfloat16, True, ROWWISE),
    ],
)
def test_pallas_matches_oracle_on_gpu(dtype, seq, config):
    """L not a multiple of the block, headdim and N not powers of two, three groups, packed sequences; the default
    path, kept states, the two-level state passes (states kept or not; the forward's outputs by fused segments or
    from every block's state; the forward's alone) and the row-wise d cs, compiled."""
    cpu.test_pallas_matches_oracle_and_reference(
        2, 301, 6, 48, 40, 3, 256, dtype, "HP", True, True, seq, True, (0.0, float("inf")), config
    )


@pytest.mark.parametrize(
    "batch,seqlen,nheads,headdim,dstate,groups,dtype,D,z,config",
    [
        (2, 320, 6, 64, 64, 3, jnp.bfloat16, "HP", True, MOSAIC_DX),
        (1, 192, 4, 128, 128, 2, jnp.float16, "H", False, MOSAIC_DX),
        (1, 64, 2, 64, 256, 1, jnp.bfloat16, None, True, MOSAIC_DX),
        (2, 320, 6, 64, 64, 3, jnp.bfloat16, "HP", True, MOSAIC),
        (1, 192, 4, 128, 128, 2, jnp.float16, "H", False, MOSAIC),
        (1, 128, 4, 64, 256, 1, jnp.bfloat16, None, True, MOSAIC),
        (1, 128, 4, 64, 256, 2, jnp.bfloat16, "H", True, MOSAIC_64_COLUMNS),
    ],
)
def test_mosaic_kernels_match_oracle_on_gpu(batch, seqlen, nheads, headdim, dstate, groups, dtype, D, z, config):
    """The Mosaic GPU backward kernels, compiled: the per-head kernel alone (the default on Hopper), then with the
    dB/dC kernel; several blocks, groups of 1-3 heads, two 64-dim parts per head (P 128), N 64-256 (two and four
    column tiles), with and without z and D."""
    cpu.test_pallas_matches_oracle_and_reference(
        batch,
        seqlen,
        nheads,
        headdim,
        dstate,
        groups,
        256,
        dtype,
        D,
        z,
        True,
        False,
        True,
        (0.0, float("inf")),
        config,
    )


@pytest.mark.parametrize(
    "batch,seqlen,nheads,headdim,dstate,groups,dtype,D,z,config",
    [
        (2, 320, 6, 64, 64, 3, jnp.bfloat16, "HP", True, MOSAIC_FORWARD),
        (1, 192, 4, 128, 128, 2, jnp.float16, "H", False, MOSAIC_FORWARD),
        (1, 128, 4, 64, 256, 1, jnp.bfloat16, None, True, MOSAIC_FORWARD_ONE_STAGE),
        (2, 320, 6, 64, 64, 3, jnp.bfloat16, "HP", True, MOSAIC_SEGMENTS),
        (1, 256, 4, 128, 128, 2, jnp.float16, "H", True, MOSAIC_SEGMENTS),
        (1, 320, 4, 64, 256, 2, jnp.bfloat16, "H", True, MOSAIC_SEGMENTS_KEPT),
        pytest.param(2, 320, 6, 64, 64, 3, jnp.bfloat16, "HP", True, MOSAIC_FORWARD_KEPT, id="forward-kept"),
        pytest.param(1, 128, 4, 64, 256, 1, jnp.bfloat16, None, True, MOSAIC_FORWARD_PIECES, id="n256-pieces"),
        pytest.param(2, 320, 6, 64, 128, 3, jnp.bfloat16, "HP", True, MOSAIC_SEGMENTS_PIECES, id="segments-pieces"),
        pytest.param(1, 320, 4, 64, 256, 2, jnp.bfloat16, "H", True, MOSAIC_SEGMENTS_PIECES, id="n256-segments-pieces"),
        pytest.param(1, 256, 4, 128, 256, 2, jnp.float16, "H", True, MOSAIC_SEGMENTS_FOUR_PIECES, id="four-pieces"),
        pytest.param(1, 320, 4, 64, 256, 1, jnp.bfloat16, None, True, MOSAIC_FORWARD_HALVES, id="n256-halves"),
        pytest.param(2, 320, 6, 64, 256, 3, jnp.bfloat16, "HP", True, MOSAIC_SEGMENTS_HALVES, id="segments-halves"),
        pytest.param(
            1, 640, 4, 128, 128, 2, jnp.float16, "H", False, MOSAIC_LONG_SEGMENTS_HALVES, id="p128-halves-segments"
        ),
        pytest.param(1, 448, 4, 64, 256, 2, jnp.bfloat16, "H", True, MOSAIC_FORWARD_HALVES_KEPT, id="n256-halves-kept"),
    ],
)
def test_mosaic_forward_matches_oracle_on_gpu(batch, seqlen, nheads, headdim, dstate, groups, dtype, D, z, config):
    """The forward's walk and the state passes on Mosaic GPU, compiled, with both Mosaic backward kernels: whole (one
    walk a sequence) and per segment of 2 blocks (5 blocks: the last walk one block), every block's state stored or
    float32 states kept (a whole walk that keeps them runs per segment of them); groups of 1-3 heads, P 64 and 128,
    N 64-256, with and without z and D, from an initial state; B and C by ``emit_pipeline`` or in two or four pieces
    of N's columns; the state in halves of N on two warpgroups (whole, per segment of 2 and 4 blocks, keeping
    states)."""
    test_mosaic_kernels_match_oracle_on_gpu(batch, seqlen, nheads, headdim, dstate, groups, dtype, D, z, config)


def _vjp(arrays, dtypes, cotangent, chunk, impl, config=None):
    names = list(arrays)

    def run(*xs):
        kw = dict(zip(names, xs, strict=True))
        return mamba_chunk_scan_combined(**kw, chunk_size=chunk, dt_softplus=True, impl=impl, config=config)

    out, vjp = jax.vjp(jax.jit(run), *[jnp.asarray(arrays[k], dtypes[k]) for k in names])
    grads = dict(zip(names, vjp(jnp.asarray(cotangent, out.dtype)), strict=True))
    return np.asarray(out.astype(jnp.float32)), {k: np.asarray(v.astype(jnp.float32)) for k, v in grads.items()}


@pytest.mark.parametrize(
    "mosaic_dx,mosaic_dbc", [(True, False), (False, False), (True, True)], ids=["mosaic-dx", "triton", "mosaic"]
)
def test_pallas_matches_reference_and_mamba_ssm_at_130m(cuda_triton_reference, rng, mosaic_dx, mosaic_dbc):
    """The default tiling at 130m, with the backward's per-head and dB/dC kernels on Mosaic GPU (the default on
    Hopper), the dB/dC kernel on Triton, or both on Triton (elsewhere)."""
    from torch_reference.ops import run_ssd

    op = OPS["ssd"]
    shape = op.shapes["130m"]
    arrays, dtypes, cotangent = op.inputs(shape, "bfloat16", seed=int(rng.integers(2**31)))
    chunk = shape[-1]
    config = op.shape_config(shape, "bfloat16")
    config = dataclasses.replace(config, bwd_dx_mosaic=mosaic_dx, bwd_dbc_mosaic=mosaic_dbc)
    out, grads = _vjp(arrays, dtypes, cotangent, chunk, "pallas", config)
    ref_out, ref_grads = _vjp(arrays, dtypes, cotangent, chunk, "reference")
    f32 = {k: "float32" for k in dtypes}
    kw = dict(chunk_size=chunk, dt_softplus=True)
    (cuda_out,), cuda_grads = run_ssd(cuda_triton_reference, arrays, dtypes, cotangent, **kw)
    (cuda_out32,), cuda_grads32 = run_ssd(cuda_triton_reference, arrays, f32, cotangent, **kw)

    assert_matches_reference_and_mamba_ssm(
        (out, grads), (ref_out, ref_grads), (cuda_out, cuda_grads), (cuda_out32, cuda_grads32), dtypes
    )


def test_varlen_states_match_mamba_ssm(cuda_triton_reference, rng):
    """Packed sequences (one of length 1, ends inside and at chunk edges) at bf16: ours (the Pallas scan, varlen
    states from its inputs) against mamba-ssm's ``return_varlen_states`` on the same values."""
    from torch_reference.ops import ssd_varlen_states

    lengths = [300, 1, 212, 511]
    seqlen = sum(lengths)
    arrays, _, _ = cpu.make_inputs(rng, 1, seqlen, 8, 64, 64, 2, jnp.bfloat16, init=False)
    seq_idx = np.repeat(np.arange(len(lengths)), lengths)[None].astype(np.int32)
    cu_seqlens = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    _, ours = mamba_chunk_scan_combined(
        **arrays, chunk_size=256, seq_idx=jnp.asarray(seq_idx), cu_seqlens=jnp.asarray(cu_seqlens),
        dt_softplus=True, return_varlen_states=True, impl="pallas",
    )  # fmt: skip
    numpy_arrays = {k: None if v is None else np.asarray(v.astype(jnp.float32)) for k, v in arrays.items()}
    dtypes = {k: ("float32" if k in ("A", "D", "dt_bias") else "bfloat16") for k in numpy_arrays}
    theirs = ssd_varlen_states(cuda_triton_reference, numpy_arrays, dtypes, seq_idx, cu_seqlens, chunk_size=256)
    assert theirs.shape == ours.shape
    assert_close("varlen states vs mamba-ssm", np.asarray(ours), theirs, jnp.bfloat16)
