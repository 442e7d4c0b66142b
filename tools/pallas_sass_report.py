"""Print what a Pallas op's kernels compile to for an H100, without a GPU (``compare.kernels.triton_ir``): registers,
spills, shared memory and PTX instruction counts per kernel, for any shape and config.

Usage: ``python tools/pallas_sass_report.py [--op selective_scan|ssd] --shape SHAPE [--config FIELDS] [--backward]
[--dump DIR]``, e.g.

    python tools/pallas_sass_report.py --shape 8,2048,1536,16 --config design=chunked,block_d=8,rows=8 --backward
    python tools/pallas_sass_report.py --op ssd --shape 1,65536,128,64,128,1 --config two_level_states=1 --backward
"""

import argparse
import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp

from compare.kernels.bench import parse_config
from compare.kernels.ops import OPS
from compare.kernels.triton_ir import compile_sm90, triton_modules
from pallas_kernels import selective_scan_fn
from pallas_kernels.selective_scan import api as selective_scan_api
from pallas_kernels.selective_scan.heuristics import default_config
from pallas_kernels.ssd import api as ssd_api

SSD_WARPS = {  # SsdConfig's warps field of each kernel; the state passes and walks take state_num_warps
    "ssd_fwd_fused": "num_warps",
    "ssd_fwd_fused_segments": "num_warps",
    "ssd_fwd_out": "num_warps",
    "ssd_bwd_dx": "bwd_num_warps",
    "ssd_bwd_dbc": "dbc_num_warps",
}

SSD_BWD_STAGES = {  # kernels that take SsdConfig.bwd_num_stages; the rest take num_stages
    "ssd_bwd_dstates",
    "ssd_bwd_segment_dstates",
    "ssd_bwd_block_dstates",
    "ssd_bwd_dx",
    "ssd_bwd_dbc",
}


def selective_scan_kernels(shape: str, config_text: str, backward: bool):
    """(kernel name, Triton IR, warps, stages: Triton's default) of the selective scan at ``batch,L,dim,N[,G]``."""
    batch, seqlen, dim, dstate, *rest = (int(v) for v in shape.split(","))
    groups = rest[0] if rest else 1
    config = parse_config(config_text).config if config_text else None
    bf16 = jnp.bfloat16
    u = jax.ShapeDtypeStruct((batch, seqlen, dim), bf16)
    A = jax.ShapeDtypeStruct((dim, dstate), jnp.float32)
    bc = jax.ShapeDtypeStruct((batch, seqlen, groups, dstate), bf16)
    vec = jax.ShapeDtypeStruct((dim,), jnp.float32)

    def forward(u, delta, A, B, C, D, z, bias):
        return selective_scan_fn(u, delta, A, B, C, D, z, bias, True, impl="pallas", config=config)

    selective_scan_api.interpret_mode = lambda: False  # compile the kernels, as on a GPU
    config = config or default_config(dstate, dim // groups, batch * groups)
    for name, ir_text in triton_modules(_with_backward(forward, backward), u, u, A, bc, bc, vec, u, vec):
        warps = config.bwd_num_warps if "bwd" in name or "adjoints" in name else config.num_warps  # backward passes
        yield name, ir_text, warps, None


def ssd_kernels(shape: str, config_text: str, backward: bool):
    """(kernel name, Triton IR, warps, stages) of the chunked SSD at ``batch,L,H,P,N,G``: the config that
    ``impl="pallas"`` picks there on an H100, with ``config_text``'s fields laid over it (as ``compare.kernels
    --pallas-config``)."""
    batch, seqlen, nheads, headdim, dstate, groups = (int(v) for v in shape.split(","))
    config = ssd_api.pallas_config(batch, seqlen, nheads, headdim, dstate, jnp.bfloat16, groups)
    if config_text:
        config = dataclasses.replace(config, **parse_config(config_text, OPS["ssd"]).overrides)
        config.validate()
    bf16 = jnp.bfloat16
    x = jax.ShapeDtypeStruct((batch, seqlen, nheads, headdim), bf16)
    dt = jax.ShapeDtypeStruct((batch, seqlen, nheads), bf16)
    bc = jax.ShapeDtypeStruct((batch, seqlen, groups, dstate), bf16)
    heads = jax.ShapeDtypeStruct((nheads,), jnp.float32)

    def forward(x, dt, A, B, C, D, z, bias):
        return ssd_api.mamba_chunk_scan_combined(
            x, dt, A, B, C, 256, D=D, z=z, dt_bias=bias, dt_softplus=True, impl="pallas", config=config
        )

    ssd_api.interpret_mode = lambda: False  # compile the kernels, as on a GPU
    for name, ir_text in triton_modules(_with_backward(forward, backward), x, dt, heads, bc, bc, heads, x, heads):
        stages = config.bwd_num_stages if name in SSD_BWD_STAGES else config.num_stages
        yield name, ir_text, getattr(config, SSD_WARPS.get(name, "state_num_warps")), stages


def _with_backward(forward, backward: bool):
    if not backward:
        return forward

    def forward_backward(*xs):
        out, vjp = jax.vjp(forward, *xs)
        return vjp(out)

    return forward_backward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--op", choices=["selective_scan", "ssd"], default="selective_scan")
    parser.add_argument(
        "--shape", default="8,2048,1536,16", help="selective_scan: batch,L,dim,N[,G]; ssd: batch,L,H,P,N,G"
    )
    parser.add_argument("--config", default="", help="the op's config fields, as compare.kernels --pallas-config")
    parser.add_argument("--backward", action="store_true", help="also the backward kernels")
    parser.add_argument("--dump", help="folder for each kernel's Triton GPU IR (layouts)")
    args = parser.parse_args()
    kernels = ssd_kernels if args.op == "ssd" else selective_scan_kernels
    for name, ir_text, warps, stages in kernels(args.shape, args.config, args.backward):
        dump = None
        if args.dump:
            Path(args.dump).mkdir(parents=True, exist_ok=True)
            dump = str(Path(args.dump) / f"{name}.ttgir")
        print(name, f"warps={warps}", compile_sm90(ir_text, warps, dump, stages))


if __name__ == "__main__":
    main()
