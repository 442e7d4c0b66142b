"""The JAX side's target for Nsight Compute:
``python -m compare.characterize.ncu_target --config NAME [--key=value ...]``.

Builds the same training setup and batches as ``compare.characterize``, compiles and warms the jit train step, then
runs one step inside the driver's capture range (``compare.characterize.ncu.cuda_profiler_range``); run under
``ncu --profile-from-start off`` so that only that step's kernels are counted.

``--compile-cache DIR``: JAX's persistent compilation cache. ``compare.characterize`` runs the target once without ncu
to fill it, then under ncu, where every executable (with the GEMM and convolution algorithms XLA's autotuner chose)
is loaded rather than compiled: compiling under ncu's injection crashed inside XLA (MambaVision-T on an H100)."""

import argparse
import os
import sys
from pathlib import Path

import jax

from compare.characterize.ncu import cuda_profiler_range
from compare.characterize.report import jax_training
from compare.characterize.step_profile import warm_window
from compare.kernels.launches import name_every_launch
from jax_mamba.configs.loader import parse_args_with_overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.characterize.ncu_target", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=2, help="warm-up batches (the profiled step reuses the first)")
    parser.add_argument("--compile-cache", type=Path, help="persistent compilation cache folder (every executable)")
    args, overrides = parse_args_with_overrides(parser, argv)
    if args.compile_cache is not None:
        use_compile_cache(args.compile_cache)
    name_every_launch()
    # exact cudaMalloc/cudaFree, no pool: ncu saves and restores all allocated memory around every replay
    os.environ.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    with jax_training(args.config, overrides, args.steps) as (setup, batches):
        warm_window(setup, batches, cuda_profiler_range)
    return 0


def use_compile_cache(folder: Path) -> None:
    """Every executable (and XLA's autotuning results) to and from ``folder``, however fast it compiled."""
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


if __name__ == "__main__":
    sys.exit(main())
