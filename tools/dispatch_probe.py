"""Is a multi-device train step bound by the device or by the host's dispatch? ``python tools/dispatch_probe.py CONFIG
[--key=value ...]`` (adds ``--mesh.data=2``; on GPUs, command buffers as in training).

Compiles the config's train step as ``compare.mesh_profile`` does and runs rounds of 8 steps, timing each dispatch
call on the host and the whole round to its last result. A host that keeps ahead of the devices returns from the
round's loop well before the results are ready (host loop per step < step); a host-bound step has the two equal.
The rounds alternate the step index passed from the host (``np.int32``, as the training loop does) with one placed
on the devices ahead of time, to see whether that per-step host-to-device copy holds the devices back."""

import statistics
import sys
import time

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from compare.step_profile import compile_step
from jax_mamba.configs.loader import load_config
from jax_mamba.train.mesh_training import mesh_training


def main(argv: list[str]) -> None:
    cfg = load_config(argv[0], ["--mesh.data=2", *argv[1:]])
    with mesh_training(cfg) as (mesh, _, setup, batches):
        made = [batches(step) for step in range(4)]
        began = time.perf_counter()
        compiled, _ = compile_step(setup, made[0])
        print(f"compile {time.perf_counter() - began:.1f} s", flush=True)
        carry = [setup.params, setup.opt_state, setup.state]
        replicated = NamedSharding(mesh, P())

        def rounds(kind: str, n: int = 8, reps: int = 3) -> float:
            walls = []
            for r in range(reps):
                indices = [np.int32(i) for i in range(n)]
                if kind == "device":
                    indices = jax.block_until_ready([jax.device_put(i, replicated) for i in indices])
                calls, out = [], None
                start = time.perf_counter()
                for i in range(n):
                    called = time.perf_counter()
                    *carry[:], out = compiled(*carry, made[i % len(made)], indices[i])
                    calls.append(time.perf_counter() - called)
                returned = time.perf_counter()
                jax.block_until_ready(out)
                walls.append((time.perf_counter() - start) / n)
                print(
                    f"{kind} round {r}: step {walls[-1] * 1e3:.1f} ms, host loop {(returned - start) / n * 1e3:.1f} "
                    f"ms/step, median call {statistics.median(calls) * 1e3:.2f} ms, max call {max(calls) * 1e3:.1f}",
                    flush=True,
                )
            return statistics.median(walls)

        for kind in ("host", "device", "host", "device"):
            print(kind, f"{rounds(kind) * 1e3:.1f} ms/step", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python tools/dispatch_probe.py CONFIG [--key=value ...]")
    main(sys.argv[1:])
