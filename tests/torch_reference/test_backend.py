"""The mamba-ssm loader's CPU fallback: real mamba-ssm code, its own reference functions standing in for CUDA/Triton."""

import pytest


def test_cpu_fallback_is_real_mamba_ssm_and_says_so(cpu_reference):
    import mamba_ssm
    import mamba_ssm.modules.mamba_simple as mamba_simple
    import selective_scan_cuda

    assert mamba_ssm.__version__ == "2.3.2.post1"
    assert cpu_reference.device == "cpu"
    assert not any(cpu_reference.fast_paths.values())
    assert "fallbacks" in cpu_reference.describe() and "selective_scan_cuda" in cpu_reference.describe()
    assert mamba_simple.selective_scan_fn is cpu_reference.selective_scan_ref
    with pytest.raises(RuntimeError, match="not built"):
        selective_scan_cuda.fwd()
    assert cpu_reference.model_options("Mamba2") == {
        "fused_add_norm": False,
        "ssm_overrides": {"use_mem_eff_path": False},
    }


def test_one_device_per_process(cpu_reference):
    from torch_reference.backend import load

    assert load("cpu") is cpu_reference
    with pytest.raises(RuntimeError, match="already loaded for cpu"):
        load("cuda")
    with pytest.raises(ValueError, match="device must be"):
        load("tpu")


def test_nvlabs_mambavision_runs_on_the_cpu_fallback(cpu_reference):
    """NVlabs' package imports mamba-ssm's selective_scan_fn into its own module: on the CPU that name must be
    mamba-ssm's reference scan too (the stub CUDA module would raise)."""
    from torch_reference.mamba_vision import nvlabs_module

    module = nvlabs_module(cpu_reference)
    assert module.selective_scan_fn is cpu_reference.selective_scan_ref
