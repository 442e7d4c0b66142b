"""compare.kernels: the cost model behind the floor, the tiling-variant parser, the timing loop; the command itself
needs a GPU and refuses to run without one."""

import jax
import pytest

from compare import kernels
from pallas_kernels.selective_scan.config import ScanConfig


def test_selective_scan_costs_at_the_130m_shape():
    costs = kernels.selective_scan_costs(kernels.SHAPES["130m"], "bfloat16")
    act = 8 * 2048 * 1536 * 2  # one bf16 (batch, L, dim) tensor
    bc = 8 * 2048 * 16 * 2  # one bf16 (batch, L, 1, N) tensor
    params = 1536 * 16 * 4 + 2 * 1536 * 4
    assert costs["forward"] == {"bytes": 4 * act + 2 * bc + params, "exps": 402_653_184}
    assert costs["forward+backward"]["exps"] == 2 * 402_653_184
    # forward, then the backward reads u, delta, z, B, C, dout and writes du, ddelta, dz, dB, dC
    assert costs["forward+backward"]["bytes"] == 11 * act + 6 * bc + 3 * params


def test_pallas_config_variants_parse_and_validate():
    variant = kernels.parse_config("block_d=8,chunk=16")
    assert variant.impl == "pallas" and variant.config == ScanConfig(block_d=8, chunk=16)
    with pytest.raises(SystemExit, match="unknown field 'blockd'"):
        kernels.parse_config("blockd=8")
    with pytest.raises(ValueError, match="block_d must be a positive power of two"):
        kernels.parse_config("block_d=12")


def test_median_ms_times_back_to_back_calls():
    calls = []
    ms = kernels.median_ms(lambda: calls.append(1), lambda _: None, reps=3, target_ms=1.0)
    assert ms >= 0.0 and len(calls) >= 3 + 4  # warm-up calls, then at least one per repetition


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="checks the refusal without a GPU")
def test_command_needs_a_gpu():
    with pytest.raises(SystemExit, match="JAX sees no GPU"):
        kernels.main(["--shapes", "130m"])


def test_mamba_ssm_calls_time_and_match_our_reference(cpu_reference):
    """The torch side on mamba-ssm's CPU fallback: its output equals ours on the same values; both passes time."""
    import jax.numpy as jnp

    from compare.tolerances import assert_close
    from pallas_kernels import selective_scan_fn
    from torch_reference.kernel_calls import selective_scan_calls

    arrays, dtypes, cotangent = kernels.selective_scan_inputs((2, 19, 8, 4, 1), "float32", seed=3)
    calls = selective_scan_calls(cpu_reference, arrays, dtypes, cotangent, delta_softplus=True)
    ours = selective_scan_fn(**{k: jnp.asarray(v) for k, v in arrays.items()}, delta_softplus=True)
    assert_close("mamba-ssm output", calls.output, ours, jnp.float32)
    timed = kernels.time_passes(calls.forward, calls.forward_backward, calls.sync, reps=2)
    assert set(timed) == {"forward", "forward+backward"} and all(ms > 0 for ms in timed.values())
