"""Print what the selective scan's Pallas kernels compile to for an H100, without a GPU (``compare.triton_ir``):
registers, spills, shared memory and PTX instruction counts per kernel, for any shape and ``ScanConfig``.

    python tools/pallas_sass_report.py --shape 8,2048,1536,16 --config design=chunked,block_d=8,rows=8 --backward
"""

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp

from compare.kernels import parse_config
from compare.triton_ir import compile_sm90, triton_modules
from pallas_kernels import selective_scan_fn
from pallas_kernels.selective_scan import api as selective_scan_api
from pallas_kernels.selective_scan.config import default_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="8,2048,1536,16", help="batch,L,dim,N[,G]")
    parser.add_argument("--config", default="", help="ScanConfig fields, as compare.kernels --pallas-config")
    parser.add_argument("--backward", action="store_true", help="also the backward kernels")
    parser.add_argument("--dump", help="folder for each kernel's Triton GPU IR (layouts)")
    args = parser.parse_args()
    batch, seqlen, dim, dstate, *rest = (int(v) for v in args.shape.split(","))
    groups = rest[0] if rest else 1
    config = parse_config(args.config).config if args.config else None
    bf16 = jnp.bfloat16
    u = jax.ShapeDtypeStruct((batch, seqlen, dim), bf16)
    A = jax.ShapeDtypeStruct((dim, dstate), jnp.float32)
    bc = jax.ShapeDtypeStruct((batch, seqlen, groups, dstate), bf16)
    vec = jax.ShapeDtypeStruct((dim,), jnp.float32)

    def forward(u, delta, A, B, C, D, z, bias):
        return selective_scan_fn(u, delta, A, B, C, D, z, bias, True, impl="pallas", config=config)

    def forward_backward(*xs):
        out, vjp = jax.vjp(forward, *xs)
        return vjp(out)

    fn = forward_backward if args.backward else forward
    selective_scan_api.interpret_mode = lambda: False  # compile the kernels, as on a GPU
    config = config or default_config(dstate, dim // groups, batch * groups)
    for name, ir_text in triton_modules(fn, u, u, A, bc, bc, vec, u, vec):
        warps = config.bwd_num_warps if "bwd" in name or "adjoints" in name else config.num_warps  # backward passes
        dump = None
        if args.dump:
            Path(args.dump).mkdir(parents=True, exist_ok=True)
            dump = str(Path(args.dump) / f"{name}.ttgir")
        print(name, f"warps={warps}", compile_sm90(ir_text, warps, dump))


if __name__ == "__main__":
    main()
