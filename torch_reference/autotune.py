"""mamba-ssm's autotuned Triton kernels held to one config each, for checks that need its results and not its speed.

mamba-ssm 2.3.2.post1's Mamba-3 kernels autotune 27 configs each (54 where the chunk size is tuned too), compiling
and timing every one for every new shape: several minutes per shape before a parity test computes anything. With
one config a kernel compiles once per shape. The results are the op's at that config (a tuned chunk size changes
the rounding of the sums, nothing else). Never use this for timings.
"""

import importlib
import pkgutil

PREFERRED = {"num_warps": 4, "num_stages": 2}  # a middle config that every kernel's list holds


def _autotuners(module):
    """The Autotuner objects a module defines, through any ``triton.heuristics`` wrapped around them."""
    from triton.runtime.autotuner import Autotuner

    for value in vars(module).values():
        while value is not None and not isinstance(value, Autotuner) and hasattr(value, "fn"):
            value = value.fn
        if isinstance(value, Autotuner):
            yield value


def _preferred(configs: list):
    """The first config with PREFERRED's warps and stages and no register cap, else the first."""
    for config in configs:
        if all(getattr(config, k) == v for k, v in PREFERRED.items()) and config.maxnreg is None:
            return config
    return configs[0]


def one_config_each(package: str = "mamba_ssm.ops.triton.mamba3") -> int:
    """Every autotuned kernel in ``package``'s modules keeps one config (``_preferred``). Process-wide and not undone.
    Returns how many kernels had more than one."""
    root = importlib.import_module(package)
    trimmed = 0
    for info in pkgutil.iter_modules(root.__path__):
        for tuner in _autotuners(importlib.import_module(f"{package}.{info.name}")):
            if len(tuner.configs) > 1:
                tuner.configs = [_preferred(tuner.configs)]
                trimmed += 1
    return trimmed
