"""torch_reference.autotune: mamba-ssm's Mamba-3 Triton kernels (imported, not run: no GPU needed) keep one config."""

import importlib
import pkgutil

import pytest

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


def test_every_mamba3_kernel_keeps_one_middle_config(cpu_reference):
    from torch_reference.autotune import _autotuners, one_config_each

    package = "mamba_ssm.ops.triton.mamba3"
    modules = [
        importlib.import_module(f"{package}.{m.name}")
        for m in pkgutil.iter_modules(importlib.import_module(package).__path__)
    ]
    tuners = [t for module in modules for t in _autotuners(module)]
    before = {id(t): len(t.configs) for t in tuners}
    assert sum(n > 1 for n in before.values()) >= 4 and max(before.values()) >= 27
    assert one_config_each(package) == sum(n > 1 for n in before.values())
    for tuner in tuners:
        (config,) = tuner.configs
        if before[id(tuner)] > 1:
            assert (config.num_warps, config.num_stages, config.maxnreg) == (4, 2, None)
    assert one_config_each(package) == 0
