"""One jitted forward+backward (or forward) of the Pallas SSD at a shape and config, run a few times: the program to
put under a profiler (``ncu --kernel-name regex:ssd_bwd_dx ... python tools/ssd_step.py --shape 8,2048,24,64,128,1``).

Usage: ``python tools/ssd_step.py [--shape B,L,H,P,N,G] [--config FIELDS] [--steps N] [--forward-only]``.

The inputs, calls and config are ``python -m compare.kernels --op ssd``'s for the same shape: its Mamba2-like bf16
values (``compare.kernels.ops.ssd_inputs``), the config ``impl="pallas"`` picks for the shape on this GPU with the
``--config`` fields laid over it (``--pallas-config`` syntax). Besides the forward+backward runs, setting up the
calls runs the forward once.
"""

import argparse

import jax

from compare.kernels.bench import for_shape, parse_config
from compare.kernels.ops import OPS, Variant

DTYPE = "bfloat16"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="8,2048,24,64,128,1", help="batch,L,heads,headdim,dstate,groups")
    parser.add_argument("--chunk", type=int, default=256, help="mamba-ssm's chunk_size (checked, not a tiling)")
    parser.add_argument("--config", default="", help="SsdConfig fields over the shape's default, e.g. num_warps=8")
    parser.add_argument("--steps", type=int, default=3, help="forward+backward runs after the compiling one")
    parser.add_argument("--forward-only", action="store_true", help="run the forward alone (no saved states)")
    args = parser.parse_args()
    op = OPS["ssd"]
    shape = (*(int(v) for v in args.shape.split(",")), args.chunk)
    variant = for_shape(parse_config(args.config, op) if args.config else Variant("pallas", "pallas"), op, shape, DTYPE)
    print(variant.config or op.shape_config(shape, DTYPE))
    arrays, dtypes, cotangent = op.inputs(shape, DTYPE, 0)
    calls = op.jax_calls(variant, arrays, dtypes, cotangent, shape)
    run = calls.forward if args.forward_only else calls.forward_backward
    for _ in range(1 + args.steps):
        jax.block_until_ready(run())


if __name__ == "__main__":
    main()
