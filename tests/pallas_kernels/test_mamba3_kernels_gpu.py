"""On a GPU (marked ``gpu``): Mamba-3's SISO and MIMO ops on their compiled Mosaic GPU kernels, the CPU file's
checks (test_mamba3_kernels.py: outputs and final states against the float64 oracle, every gradient against the
float32 reference) at the mamba3-130m mixer's head sizes, over awkward lengths, and over segments of the walk; the
decoding steps' kernel (test_mamba3_step_kernel.py's checks).
mamba-ssm's Triton op is compared in tests/torch_reference/test_mamba3_gpu.py."""

import pytest

from pallas_kernels.ssd.config import SsdConfig
from tests.pallas_kernels import test_mamba3_kernels as cpu
from tests.pallas_kernels import test_mamba3_step_kernel as step

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "batch,seqlen,groups,heads,headdim,dstate,pairs,has_d,has_z,has_states",
    [
        (2, 256, 1, 4, 64, 128, 32, True, True, False),  # 130m's heads: P 64, N 128, S 32
        (1, 200, 2, 4, 64, 128, 16, True, True, True),  # a partial block, two groups, input states
        (3, 1, 1, 2, 64, 64, 8, False, True, True),  # one step
        (1, 130, 1, 2, 48, 96, 12, True, False, False),  # P and N padded to 64 and 128
    ],
)
def test_compiled_kernels_match_the_oracle_and_the_reference_gradients(
    rng, batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states
):
    case = (batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states)
    cpu.test_kernels_match_the_oracle_and_the_reference_gradients(rng, *case)


@pytest.mark.parametrize(
    "batch,seqlen,rank,groups,heads,headdim,dstate,divisor,has_d,has_z,has_out,states",
    [(2, 256, 4, 1, 4, 64, 128, 4, True, True, True, True), (1, 100, 2, 2, 4, 64, 64, 2, True, False, False, False)],
)
def test_compiled_mimo_kernels(
    rng, batch, seqlen, rank, groups, heads, headdim, dstate, divisor, has_d, has_z, has_out, states
):
    case = (batch, seqlen, rank, groups, heads, headdim, dstate, divisor, has_d, has_z, has_out, states)
    cpu.test_mimo_kernels_match_the_oracle_and_the_reference_gradients(rng, *case)


def test_compiled_walk_in_segments(rng):
    cpu.test_the_walk_in_segments_matches_the_oracle(rng)


def test_compiled_packed_sequences(rng):
    cpu.test_packed_sequences_each_run_as_alone(rng)


def test_the_default_config_walks_a_long_sequence_in_segments():
    """B1 L65536 at 130m's heads: the SSD's default config walks it in segments (one program per head and 64 head
    dims would leave most SMs idle), which the Mamba-3 scan then follows."""
    import jax.numpy as jnp

    from pallas_kernels.mamba3.mosaic_gpu.scan import scan_dims
    from pallas_kernels.ssd.api import pallas_config
    from pallas_kernels.ssd.dims import segment_dims

    config = pallas_config(1, 65536, 24, 64, 128, jnp.bfloat16, ngroups=24)
    x = jnp.zeros((1, 65536, 24, 64), jnp.bfloat16)
    dims = scan_dims(x, jnp.zeros((1, 65536, 24, 128), jnp.bfloat16), None, None, False)
    assert isinstance(config, SsdConfig) and config.fused_segments and segment_dims(dims, config) is not None


@pytest.mark.parametrize(
    "batch,groups,heads,headdim,dstate,pairs,has_d,has_z,has_states,dtype,state_dtype",
    [
        (64, 1, 24, 64, 128, 32, True, True, True, "bfloat16", "float32"),  # 130m's heads at batch 64
        (3, 2, 4, 128, 16, 4, False, True, True, "bfloat16", "bfloat16"),  # two row tiles, a 16-bit state
        (1, 1, 2, 64, 8, 2, True, False, False, "float32", "float32"),  # N 8, zeros for states
    ],
)
def test_compiled_step_kernel(
    rng, batch, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states, dtype, state_dtype
):
    import jax.numpy as jnp

    case = (batch, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states, jnp.dtype(dtype))
    step.test_siso_step_matches_the_oracle(rng, *case, jnp.dtype(state_dtype))


@pytest.mark.parametrize("has_out,has_states", [(True, True), (False, False)])
def test_compiled_mimo_step_kernel(rng, has_out, has_states):
    step.test_mimo_step_matches_the_oracle(rng, has_out, has_states)
