"""The selective scan backward's dB/dC partials summed over channel blocks at the mamba1-790m layer's shape
(batch 4 x 2048, 384 blocks of 8 channels, N 16): XLA's reduction (the path before the Pallas kernel) against
``block_sums.sum_block_partials``, each alone, timed as ``compare.kernels`` times kernels (``median_ms``: median of
30 samples of back-to-back calls). Run on a GPU from the repository root: ``PYTHONPATH=. python3
tools/bench_block_sums.py``."""

import jax
import jax.numpy as jnp

from compare.kernels import median_ms
from pallas_kernels.selective_scan.block_sums import sum_block_partials

SHAPE = (4, 2048, 1, 384, 16)


def main() -> None:
    keys = jax.random.split(jax.random.PRNGKey(0))
    dB, dC = (jax.random.normal(k, SHAPE) for k in keys)
    xla = jax.jit(lambda a, b: (a.sum(3).astype(jnp.bfloat16), b.sum(3).astype(jnp.bfloat16)))
    pallas = jax.jit(lambda a, b: sum_block_partials(a, b, jnp.bfloat16, False))
    read = 2 * dB.size * 4
    for name, f in (("xla", xla), ("pallas", pallas), ("xla", xla), ("pallas", pallas)):
        ms = median_ms(lambda f=f: f(dB, dC), jax.block_until_ready, reps=30)
        print(f"{name}: {ms:.4f} ms, {read / ms / 1e9:.2f} TB/s read")
    diff = jnp.abs(xla(dB, dC)[0].astype(jnp.float32) - pallas(dB, dC)[0].astype(jnp.float32))
    print(f"largest difference of the bf16 sums: {float(diff.max()):.3g}")


if __name__ == "__main__":
    main()
