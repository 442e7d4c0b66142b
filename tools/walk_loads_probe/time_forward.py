"""The forward at one shape (``compare.kernel_ops``' inputs and config, ``--config`` laid over it) with the Mosaic walk
of ``walk_kernel`` (its WALK_DIAG mode), timed by ``compare.kernels.median_ms``: ``run.sh``."""

import argparse
import os
import sys

import jax

import pallas_kernels.ssd.kernel_fwd as kernel_fwd
from compare.kernel_ops import OPS, Variant
from compare.kernels import for_shape, median_ms, parse_config

sys.path.insert(0, os.path.dirname(__file__))
import walk_kernel

kernel_fwd.mosaic_walk = walk_kernel.mosaic_walk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="2,8192,32,64,256,4", help="batch,L,heads,headdim,dstate,groups")
    parser.add_argument("--config", default="", help="SsdConfig fields over the shape's default")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    op = OPS["ssd"]
    shape = (*(int(v) for v in args.shape.split(",")), 256)
    variant = Variant("pallas", "pallas") if not args.config else parse_config(args.config, op)
    variant = for_shape(variant, op, shape, "bfloat16")
    arrays, dtypes, cotangent = op.inputs(shape, "bfloat16", 0)
    calls = op.jax_calls(variant, arrays, dtypes, cotangent, shape)
    ms = median_ms(calls.forward, jax.block_until_ready, args.reps)
    print(f"{walk_kernel.MODE:10s} {args.shape:22s} {args.config or '-':30s} median {ms:.3f} ms")


if __name__ == "__main__":
    main()
