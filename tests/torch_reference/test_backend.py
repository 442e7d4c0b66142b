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


@pytest.mark.parametrize("required", [True, False])
def test_a_gpu_without_the_build_stubs_the_extensions_only_when_allowed(tmp_path, monkeypatch, required):
    """On a GPU machine with no build in the cache: an error that says how to build, or (``require_extensions=False``,
    for comparisons of mamba-ssm's Triton kernels) a stub ``selective_scan_cuda`` that raises, and both extensions
    reported missing."""
    import sys
    import types

    import torch

    from torch_reference import backend

    monkeypatch.setenv("JAX_MAMBA_TORCH_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (9, 0))
    monkeypatch.setitem(sys.modules, "selective_scan_cuda", types.ModuleType("selective_scan_cuda"))  # restored after
    if required:
        with pytest.raises(RuntimeError, match=r"no CUDA build .* run: python -m torch_reference.build"):
            backend._register_cuda_extensions(required)
        return
    assert backend._register_cuda_extensions(required) == {"selective_scan_cuda": False, "causal_conv1d_cuda": False}
    with pytest.raises(RuntimeError, match="not built: loaded with require_extensions=False"):
        sys.modules["selective_scan_cuda"].fwd()
