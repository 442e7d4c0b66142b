"""Pick the selective-scan reference's chunk length per backend: ``python -m compare.kernels.reference_chunk_sweep``.

Times forward+backward of ``pallas_kernels.selective_scan.reference`` at the mamba1-130m layer shape
(B8 L2048 D1536 N16, bf16 inputs) for several chunk lengths; median of 20 runs after warm-up."""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels.selective_scan import reference


def time_chunk(chunk_len: int, shape: tuple[int, int, int, int], repeats: int = 20) -> float:
    b, length, d, n = shape
    keys = jax.random.split(jax.random.PRNGKey(0), 6)
    u = jax.random.normal(keys[0], (b, length, d), jnp.bfloat16)
    delta = (jax.random.normal(keys[1], (b, length, d)) - 1.0).astype(jnp.bfloat16)
    A = -jnp.exp(jax.random.normal(keys[2], (d, n)))
    B = jax.random.normal(keys[3], (b, length, 1, n), jnp.bfloat16)
    C = jax.random.normal(keys[4], (b, length, 1, n), jnp.bfloat16)
    z = jax.random.normal(keys[5], (b, length, d), jnp.bfloat16)
    D = jnp.ones((d,), jnp.float32)
    bias = jnp.full((d,), -2.0, jnp.float32)

    def loss(u, delta, B, C, z):
        out, _ = reference.selective_scan(u, delta, A, B, C, D, z, bias, True, chunk_len=chunk_len)
        return jnp.sum(out.astype(jnp.float32))

    step = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))
    args = (u, delta, B, C, z)
    jax.block_until_ready(step(*args))
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        jax.block_until_ready(step(*args))
        times.append(time.perf_counter() - began)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    parser.add_argument("--shape", type=int, nargs=4, default=[8, 2048, 1536, 16], metavar=("B", "L", "D", "N"))
    args = parser.parse_args()
    device = jax.devices()[0].device_kind
    for chunk in args.chunks:
        ms = time_chunk(chunk, tuple(args.shape)) * 1e3
        print(json.dumps({"device": device, "shape": args.shape, "chunk_len": chunk, "fwd_bwd_ms": round(ms, 3)}))


if __name__ == "__main__":
    main()
