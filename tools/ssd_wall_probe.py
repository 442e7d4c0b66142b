"""Where a JAX SSD forward+backward's wall time goes beyond its kernels: ``python tools/ssd_wall_probe.py [SHAPE]``.

Times the default Pallas SSD's forward+backward (``compare.kernels``' call, bf16) at one of ``compare.kernels``'
named shapes (default ``long``) three ways, in one process on the GPU:
- ``compare.kernels.median_ms`` with samples of 25 and of 300 ms (each sample: back-to-back calls, then one sync);
- the traced span of 5 and 20 back-to-back calls against their kernels' sum (``compare.kernel_profile``);
- 1, 2 and 8 back-to-back calls after a sync: host dispatch time and ms per call.
A fixed cost per sample (the first call's dispatch, the closing sync) shows as a per-call time that falls with the
calls a sample holds, while the traced span stays at the kernels' sum. Prints one line per figure.
"""

import sys
import time

import jax

from compare import kernel_ops, kernels
from compare.kernel_profile import launch_gaps, traced_launches


def main(shape_name: str = "long") -> None:
    op = kernel_ops.OPS["ssd"]
    shape = op.shapes[shape_name]
    arrays, dtypes, cotangent = op.inputs(shape, "bfloat16", 0)
    _, call, _, _ = op.jax_calls(kernel_ops.Variant("pallas", "pallas"), arrays, dtypes, cotangent, shape)
    for sample_ms in (25, 300, 25, 300):
        ms = kernels.median_ms(call, kernels.jax_sync, 10, sample_ms)
        print(f"samples of {sample_ms} ms: {ms:.3f} ms a forward+backward", flush=True)
    for calls in (5, 20):
        gaps = launch_gaps(traced_launches(call, calls), calls)
        print(f"traced, {calls} calls: span {gaps['span']:.1f} us a call, kernels {gaps['kernels']:.1f}", flush=True)
    for calls in (1, 2, 8):
        jax.block_until_ready(call())
        began = time.perf_counter()
        for _ in range(calls):
            out = call()
        dispatched = time.perf_counter()
        jax.block_until_ready(out)
        done = time.perf_counter()
        print(
            f"{calls} calls after a sync: dispatch {(dispatched - began) * 1e3:.3f} ms, "
            f"{(done - began) * 1e3 / calls:.3f} ms a call",
            flush=True,
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
