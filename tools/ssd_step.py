"""One jitted forward+backward of the Pallas SSD at a shape and config, run a few times: the program to put under a
profiler (``ncu --kernel-name regex:ssd_bwd_dx ... python tools/ssd_step.py --shape 8,2048,24,64,128,1``).

Inputs as mamba2 layers see them: bf16 x, z, B, C; dt around softplus⁻¹(0.01-0.1) with dt_bias; A in [-16, -1];
D per head. The config is ``default_config`` for the shape on this GPU with ``--config`` fields laid over it
(``compare.kernels``' syntax).
"""

import argparse
import dataclasses

import jax
import jax.numpy as jnp

from compare.kernel_ops import OPS
from compare.kernels import parse_config
from pallas_kernels import mamba_chunk_scan_combined


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="8,2048,24,64,128,1", help="batch,L,heads,headdim,dstate,groups")
    parser.add_argument("--config", default="", help="SsdConfig fields over the shape's default, e.g. num_warps=8")
    parser.add_argument("--steps", type=int, default=3, help="forward+backward runs after the compiling one")
    args = parser.parse_args()
    batch, seqlen, nheads, headdim, dstate, ngroups = (int(v) for v in args.shape.split(","))
    op = OPS["ssd"]
    config = op.shape_config((batch, seqlen, nheads, headdim, dstate, ngroups, 256), "bfloat16")
    if args.config:
        config = dataclasses.replace(config, **parse_config(args.config, op).overrides)
    print(config)

    keys = jax.random.split(jax.random.key(0), 8)
    bf16 = jnp.bfloat16
    x = jax.random.normal(keys[0], (batch, seqlen, nheads, headdim), bf16)
    z = jax.random.normal(keys[1], (batch, seqlen, nheads, headdim), bf16)
    B = jax.random.normal(keys[2], (batch, seqlen, ngroups, dstate), bf16)
    C = jax.random.normal(keys[3], (batch, seqlen, ngroups, dstate), bf16)
    dt = jax.random.normal(keys[4], (batch, seqlen, nheads), jnp.float32)
    dt_bias = jnp.log(jnp.expm1(jax.random.uniform(keys[5], (nheads,), minval=0.01, maxval=0.1)))
    A = -jax.random.uniform(keys[6], (nheads,), minval=1.0, maxval=16.0)
    D = jnp.ones((nheads,), jnp.float32)

    def loss(x, dt, B, C, z):
        out = mamba_chunk_scan_combined(
            x, dt, A, B, C, 256, D=D, z=z, dt_bias=dt_bias, dt_softplus=True, impl="pallas", config=config
        )
        return jnp.sum(out.astype(jnp.float32))

    step = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))
    for _ in range(1 + args.steps):
        jax.block_until_ready(step(x, dt, B, C, z))


if __name__ == "__main__":
    main()
