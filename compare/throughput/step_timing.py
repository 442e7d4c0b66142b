"""Where a training step's wall time goes: ``python -m compare.throughput.step_timing --config NAME [--key=value ...]``.

Builds the model, optimizer and jit train step exactly as ``jax_mamba.train`` does, puts one batch on the device and
times, after ``--warmup`` steps:

- ``data_ms``: making a training batch on the host and putting it on the device (the loop does this on a
  background thread, a few steps ahead);
- ``dispatch_ms``: the host time of one ``train_step(...)`` call (tracing excluded): enqueueing the compiled
  program's kernels. If it approaches ``step_ms``, the device waits on the host (launch-bound);
- ``step_ms``: wall time per step with steps dispatched back to back and one sync at the end (the device's pace
  when the host keeps up);
- ``synced_step_ms``: wall time per step when every step's loss is read before the next is dispatched;
- ``prefetched_step_ms``: back to back again, but each step on a new batch made by the training loop's background
  thread (``DevicePrefetch``): the loop's pace without its bookkeeping. Far above ``step_ms`` means the host's batch
  making slows the dispatching thread (the GIL) even when no step waits for a batch.

``--count_ops`` also compiles the step ahead of time (a second compilation) and counts the operations its
executable runs (``launched_ops``: the instructions of the optimized HLO's entry computation that launch work:
fusions, library calls, copies; each at least one kernel launch unless XLA groups them into a CUDA graph).

Run it under different ``XLA_FLAGS`` to see what the runtime's settings change. Prints one JSON line."""

import argparse
import json
import re
import sys
import time

import jax
import numpy as np

from compare.throughput.plain_step import plain_step_overrides
from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from jax_mamba.train.prefetch import DevicePrefetch
from jax_mamba.train.step import init_training

_NO_LAUNCH = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant", "after-all", "opt-barrier"}


def launched_ops(hlo_text: str) -> dict[str, int]:
    """Operations of an optimized HLO module's entry computation that launch device work, by opcode."""
    entry = hlo_text[hlo_text.index("\nENTRY") :]
    counts: dict[str, int] = {}
    for line in entry[: entry.index("\n}")].splitlines()[1:]:
        found = re.search(r"=.*?([a-z][a-z0-9\-]*)\(", line)
        if found and found.group(1) not in _NO_LAUNCH:
            counts[found.group(1)] = counts.get(found.group(1), 0) + 1
    return counts


def _median_ms(seconds: list[float]) -> float:
    return float(np.median(seconds) * 1e3)


def measure(config: str, overrides: list[str], steps: int, warmup: int, count_ops: bool = False) -> dict:
    cfg = load_config(config, plain_step_overrides(config, overrides))  # the step the PyTorch side runs
    task = task_for(cfg)
    dataset = task.make_dataset()
    setup = init_training(cfg, task)
    params, state, opt_state = setup.params, setup.state, setup.opt_state
    train_step, traces = setup.train_step, setup.traces

    data_s = []
    for step in range(warmup):
        began = time.perf_counter()
        batch = jax.block_until_ready(jax.device_put(dataset.train_batch(step, cfg.train.grad_accum_steps)))
        data_s.append(time.perf_counter() - began)
        params, opt_state, state, out = train_step(params, opt_state, state, batch, np.int32(step))
        jax.block_until_ready(out)

    dispatch_s = []
    began = time.perf_counter()
    for step in range(warmup, warmup + steps):
        call = time.perf_counter()
        params, opt_state, state, out = train_step(params, opt_state, state, batch, np.int32(step))
        dispatch_s.append(time.perf_counter() - call)
    jax.block_until_ready((params, out))
    back_to_back_s = (time.perf_counter() - began) / steps

    synced_s = []
    for step in range(warmup + steps, warmup + 2 * steps):
        call = time.perf_counter()
        params, opt_state, state, out = train_step(params, opt_state, state, batch, np.int32(step))
        float(jax.device_get(out["loss"]))
        synced_s.append(time.perf_counter() - call)

    first = warmup + 2 * steps
    accum = cfg.train.grad_accum_steps
    prefetch = DevicePrefetch(lambda step: jax.device_put(dataset.train_batch(step, accum)), first, first + steps)
    try:
        prefetch.next(first)  # the thread has started and made its first batches
        began = time.perf_counter()
        for step in range(first + 1, first + steps):
            params, opt_state, state, out = train_step(params, opt_state, state, prefetch.next(step), np.int32(step))
        jax.block_until_ready((params, out))
        prefetched_s = (time.perf_counter() - began) / (steps - 1)
    finally:
        prefetch.close()

    items = task.items_per_batch() * cfg.train.grad_accum_steps
    extra = {}
    if count_ops:
        ops = launched_ops(train_step.lower(params, opt_state, state, batch, np.int32(0)).compile().as_text())
        extra = {"launched_ops": sum(ops.values()), "launched_ops_by_kind": ops}
    return {
        "config": config,
        "device": getattr(jax.devices()[0], "device_kind", str(jax.devices()[0])),
        "overrides": overrides,
        "data_ms": _median_ms(data_s[1:] or data_s),
        "dispatch_ms": _median_ms(dispatch_s),
        "step_ms": back_to_back_s * 1e3,
        "synced_step_ms": _median_ms(synced_s),
        "prefetched_step_ms": prefetched_s * 1e3,
        f"{task.unit}_per_s": items / back_to_back_s,
        "traces": traces[0],
        "loss": float(jax.device_get(out["loss"])),
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.throughput.step_timing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=20, help="timed steps (each of the three timings)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed first steps (compilation, autotuning)")
    parser.add_argument("--count_ops", action="store_true", help="count the executable's launched operations")
    args, overrides = parse_args_with_overrides(parser, argv)
    if args.steps < 2 or args.warmup < 1:
        parser.error(f"--steps must be at least 2 and --warmup at least 1, got {args.steps} and {args.warmup}")
    print(json.dumps(measure(args.config, overrides, args.steps, args.warmup, args.count_ops)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
