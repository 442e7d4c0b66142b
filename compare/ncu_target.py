"""The JAX side's target for Nsight Compute: ``python -m compare.ncu_target --config NAME [--key=value ...]``.

Builds the same training setup and batches as ``compare.characterize``, compiles and warms the jit train step, then
runs one step inside the driver's capture range (``compare.ncu.cuda_profiler_range``); run under
``ncu --profile-from-start off`` so that only that step's kernels are counted."""

import argparse
import os
import sys

from compare.characterize import jax_training
from compare.kernel_profile import name_every_launch
from compare.ncu import cuda_profiler_range
from compare.step_profile import warm_window
from jax_mamba.configs.loader import parse_args_with_overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.ncu_target", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=2, help="warm-up batches (the profiled step reuses the first)")
    args, overrides = parse_args_with_overrides(parser, argv)
    name_every_launch()
    # exact cudaMalloc/cudaFree, no pool: ncu saves and restores all allocated memory around every replay
    os.environ.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    with jax_training(args.config, overrides, args.steps) as (setup, batches):
        warm_window(setup, batches, cuda_profiler_range)
    return 0


if __name__ == "__main__":
    sys.exit(main())
