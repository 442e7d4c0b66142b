"""On a GPU (marked ``gpu``): the compiled Pallas SSD kernels on awkward shapes against the float64 oracle, and at
the mamba2-130m shape in bf16, forward and every gradient, against the pure-JAX reference and mamba-ssm's
``mamba_chunk_scan_combined`` (its Triton kernels) on the same values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.kernel_ops import OPS
from pallas_kernels import mamba_chunk_scan_combined
from tests.pallas_kernels import test_ssd_pallas as cpu
from tests.pallas_kernels.gpu_checks import assert_matches_reference_and_mamba_ssm

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype,seq", [(jnp.bfloat16, True), (jnp.float32, False)])
def test_pallas_matches_oracle_on_gpu(rng, dtype, seq):
    """L not a multiple of the block, headdim and N not powers of two, three groups, packed sequences."""
    cpu.test_pallas_matches_oracle_and_reference(
        rng, 2, 301, 6, 48, 40, 3, 256, dtype, "HP", True, True, seq, True, (0.0, float("inf")), None
    )


def _vjp(arrays, dtypes, cotangent, chunk, impl):
    names = list(arrays)

    def run(*xs):
        kw = dict(zip(names, xs, strict=True))
        return mamba_chunk_scan_combined(**kw, chunk_size=chunk, dt_softplus=True, impl=impl)

    out, vjp = jax.vjp(jax.jit(run), *[jnp.asarray(arrays[k], dtypes[k]) for k in names])
    grads = dict(zip(names, vjp(jnp.asarray(cotangent, out.dtype)), strict=True))
    return np.asarray(out.astype(jnp.float32)), {k: np.asarray(v.astype(jnp.float32)) for k, v in grads.items()}


def test_pallas_matches_reference_and_mamba_ssm_at_130m(cuda_reference):
    from torch_reference.ops import run_ssd

    op = OPS["ssd"]
    shape = op.shapes["130m"]
    arrays, dtypes, cotangent = op.inputs(shape, "bfloat16", seed=np.random.randint(2**31))
    chunk = shape[-1]
    out, grads = _vjp(arrays, dtypes, cotangent, chunk, "pallas")
    ref_out, ref_grads = _vjp(arrays, dtypes, cotangent, chunk, "reference")
    f32 = {k: "float32" for k in dtypes}
    kw = dict(chunk_size=chunk, dt_softplus=True)
    (cuda_out,), cuda_grads = run_ssd(cuda_reference, arrays, dtypes, cotangent, **kw)
    (cuda_out32,), cuda_grads32 = run_ssd(cuda_reference, arrays, f32, cotangent, **kw)

    assert_matches_reference_and_mamba_ssm(
        (out, grads), (ref_out, ref_grads), (cuda_out, cuda_grads), (cuda_out32, cuda_grads32), dtypes
    )
