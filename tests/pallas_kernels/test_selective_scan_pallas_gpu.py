"""On a GPU (marked ``gpu``): the compiled Pallas selective scan at the 130m shape in bf16, forward and every
gradient, against the pure-JAX reference and against mamba-ssm's CUDA ``selective_scan_fn`` on the same values, with
the Triton forward and with the Mosaic GPU one; both against the float64 oracle at awkward sizes, the Mosaic GPU
kernels with packed sequences too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.kernels.ops import OPS, selective_scan_inputs
from pallas_kernels import selective_scan_fn
from pallas_kernels.selective_scan.config import ScanConfig
from tests.pallas_kernels import test_selective_scan_reference as ss
from tests.pallas_kernels.gpu_checks import assert_matches_reference_and_mamba_ssm

pytestmark = pytest.mark.gpu


def _vjp(arrays, dtypes, cotangent, impl, config=None):
    names = list(arrays)

    def run(*xs):
        kw = dict(zip(names, xs, strict=True))
        return selective_scan_fn(**kw, delta_softplus=True, impl=impl, config=config)

    out, vjp = jax.vjp(jax.jit(run), *[jnp.asarray(arrays[k], dtypes[k]) for k in names])
    (grads,) = [dict(zip(names, vjp(jnp.asarray(cotangent, out.dtype)), strict=True))]
    return np.asarray(out.astype(jnp.float32)), {k: np.asarray(v.astype(jnp.float32)) for k, v in grads.items()}


CONFIGS = {  # the scan axis inside one thread; across lanes and warps (Triton's scan splits it there)
    "default": None,
    "sequential": ScanConfig(design="sequential"),
    "chunked": ScanConfig(
        design="chunked",
        bwd_design="chunked",
        block_d=16,
        rows=8,
        bwd_rows=16,
        bwd_block_d=8,
        bwd_num_warps=2,
        segments=3,
    ),
    "chunked-wide": ScanConfig(
        design="chunked",
        bwd_design="chunked",
        block_d=4,
        rows=32,
        num_warps=4,
        bwd_rows=64,
        bwd_block_d=2,
        bwd_num_warps=4,
    ),
    "chunked-forward": ScanConfig(design="chunked", block_d=8, rows=16),  # states inside chunks for the sequential bwd
}


# The Mosaic GPU forward (128 channels a program, blocks of 32 steps) before the chunked backward from states kept
# every 256 steps, and before the sequential backward from states every 8 (blocks of 8); the Mosaic GPU backward
MOSAIC = {
    "mosaic-kept": ScanConfig(
        fwd_backend="mosaic_gpu", design="chunked", bwd_design="chunked", rows=8, bwd_rows=8, checkpoint_every=256
    ),
    "mosaic-sequential": ScanConfig(fwd_backend="mosaic_gpu", chunk=8),
    # both passes on Mosaic GPU: the backward from every block's start state, and from states kept every 256 steps
    "mosaic-both": ScanConfig(fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", chunk=8),
    "mosaic-both-kept": ScanConfig(
        fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", design="chunked", chunk=8, checkpoint_every=256
    ),
    "mosaic-segments": ScanConfig(fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", chunk=8, segments=3),
}


@pytest.mark.parametrize("config", list(MOSAIC))
def test_mosaic_kernels_match_oracle_on_gpu(rng, config):
    """L not a multiple of the block, two groups of 128 channels."""
    arrays, exact = ss.make_inputs(rng, 2, 301, 256, 16, 2, jnp.bfloat16)
    ss.assert_matches_oracle(rng, arrays, exact, True, impl="pallas", config=MOSAIC[config])


@pytest.mark.parametrize(
    "dstate,chunk,segments", [(12, 4, 1), (5, 8, 3), (1, 4, 2)], ids=["N12-blocks-of-4", "N5-segments", "N1"]
)
def test_mosaic_kernels_at_any_N_on_gpu(rng, dstate, chunk, segments):
    """N not a multiple of 4 (B and C widened in float32) and blocks of 4 steps, where the dB and dC sums' rows
    are padded to whole 128-byte TMA slots."""
    arrays, exact = ss.make_inputs(rng, 1, 157, 256, dstate, 2, jnp.bfloat16)
    config = ScanConfig(fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", chunk=chunk, segments=segments)
    ss.assert_matches_oracle(rng, arrays, exact, True, impl="pallas", config=config)


@pytest.mark.parametrize("config", ["mosaic-both", "mosaic-segments"])
def test_mosaic_kernels_run_packed_sequences_as_if_alone_on_gpu(rng, config):
    """seq_idx: every packed sequence against the oracle run on it alone, in one segment of L and in three."""
    arrays, exact = ss.make_inputs(rng, 2, 301, 256, 16, 2, jnp.bfloat16)
    ss.assert_packed_matches_separate_runs(rng, arrays, exact, True, impl="pallas", config=MOSAIC[config])


@pytest.mark.parametrize("config", list(CONFIGS))
def test_pallas_matches_oracle_on_gpu(rng, config):
    """Awkward sizes compiled for the GPU: L not a multiple of the chunk, a partial channel block, two groups."""
    arrays, exact = ss.make_inputs(rng, 2, 301, 80, 16, 2, jnp.bfloat16)
    ss.assert_matches_oracle(rng, arrays, exact, True, impl="pallas", config=CONFIGS[config])


@pytest.mark.parametrize("forward", ["triton", "mosaic", "mosaic-both-kept"])
def test_pallas_matches_reference_and_mamba_ssm_at_130m(cuda_reference, rng, forward):
    from torch_reference.ops import run_selective_scan

    arrays, dtypes, cotangent = selective_scan_inputs(
        OPS["selective_scan"].shapes["130m"], "bfloat16", seed=int(rng.integers(2**31))
    )
    config = {"triton": None, "mosaic": MOSAIC["mosaic-kept"], "mosaic-both-kept": MOSAIC["mosaic-both-kept"]}[forward]
    out, grads = _vjp(arrays, dtypes, cotangent, "pallas", config)
    ref_out, ref_grads = _vjp(arrays, dtypes, cotangent, "reference")
    f32 = {k: "float32" for k in dtypes}
    (cuda_out,), cuda_grads = run_selective_scan(cuda_reference, arrays, dtypes, cotangent, delta_softplus=True)
    (cuda_out32,), cuda_grads32 = run_selective_scan(cuda_reference, arrays, f32, cotangent, delta_softplus=True)

    assert_matches_reference_and_mamba_ssm(
        (out, grads), (ref_out, ref_grads), (cuda_out, cuda_grads), (cuda_out32, cuda_grads32), dtypes
    )
