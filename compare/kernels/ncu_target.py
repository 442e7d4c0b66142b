"""One call of a kernel op for Nsight Compute: ``python -m compare.kernels.ncu_target --op selective_scan
--shape 130m [--pallas-config ...] [--torch] [--pass forward]``.

Builds the op's inputs as ``compare.kernels`` does (same seed, same values), warms the chosen pass up (compilation,
autotuning), then runs it once inside the driver's capture range (``compare.characterize.ncu.cuda_profiler_range``).
Run it under ``ncu --profile-from-start off`` so that only that call's kernels are counted, e.g.

    ncu --profile-from-start off --clock-control none --kernel-name regex:selective_scan --section WarpStateStats \\
        python -m compare.kernels.ncu_target --op selective_scan --shape 130m --torch

``--torch`` runs mamba-ssm's kernel instead of ours (its CUDA build: ``python -m torch_reference.build``).
"""

import argparse
import os

from compare.characterize.ncu import cuda_profiler_range
from compare.kernels.bench import for_shape, jax_sync, parse_config, parse_shapes
from compare.kernels.ops import OPS, Variant

WARM_CALLS = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.kernels.ncu_target", description=__doc__)
    parser.add_argument("--op", default="selective_scan", choices=sorted(OPS))
    parser.add_argument("--shape", required=True, help="a shape name of the op, or NAME=V,V,... (its fields)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--pallas-config", help="tiling fields over the op's default, e.g. fwd_backend=mosaic_gpu")
    parser.add_argument("--torch", action="store_true", help="mamba-ssm's kernel instead of ours")
    parser.add_argument("--pass", dest="pass_name", default="forward+backward", choices=("forward", "forward+backward"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    op = OPS[args.op]
    if "=" in args.shape:
        name, shape = next(iter(parse_shapes([args.shape], op).items()))
    elif args.shape in op.shapes:
        name, shape = args.shape, op.shapes[args.shape]
    else:
        parser.error(f"--shape: {args.shape!r} is neither one of {sorted(op.shapes)} nor NAME=V,V,...")
    if args.torch and args.pallas_config:
        parser.error("--pallas-config applies to our kernels, not to --torch")
    variant = parse_config(args.pallas_config, op) if args.pallas_config else Variant("pallas", "pallas")
    # exact cudaMalloc/cudaFree, no pool: ncu saves and restores all allocated memory around every replay
    os.environ.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    arrays, dtypes, cotangent = op.inputs(shape, args.dtype, args.seed)
    if args.torch:
        from torch_reference.backend import load

        calls = op.torch_calls(load("cuda", require_extensions=op.torch_extensions), arrays, dtypes, cotangent, shape)
        sync = calls.sync
    else:
        calls = op.jax_calls(for_shape(variant, op, shape, args.dtype), arrays, dtypes, cotangent, shape)
        sync = jax_sync
    run = calls.forward if args.pass_name == "forward" else calls.forward_backward
    for _ in range(WARM_CALLS):
        sync(run())
    with cuda_profiler_range():
        sync(run())
    print(f"profiled one {args.pass_name} of {args.op} at {name} {shape} ({'mamba-ssm' if args.torch else 'ours'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
