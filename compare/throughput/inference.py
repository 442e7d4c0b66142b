"""JAX inference throughput of a config: ``python -m compare.throughput.inference --config NAME [--batch_size B]``.

The JAX side of ``compare.throughput --inference``: the model in eval mode (running statistics, no dropout),
one jit-compiled forward per batch of the config's data, synchronized after each as the PyTorch side is. Prints one
JSON line: mean items/s (tokens, images or graphs) over the steps after the first three (compilation, warm-up), less
a batch shape's first runs after them (graph size buckets: a new shape compiles, as the training loop's
``StepClock`` and the PyTorch side's new CUDA-graph captures are left out), and the device's peak memory in use."""

import argparse
import json
import sys
import time

import jax
import numpy as np
from flax import nnx

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.models import ParamLayout, compute_dtype_for
from jax_mamba.tasks import task_for
from jax_mamba.train.loop import peak_memory_bytes
from jax_mamba.train.step_clock import StepClock


def measure(config: str, steps: int, batch_size: int, seq_len: int, overrides: list[str]) -> dict:
    cfg = load_config(config, [f"--batch_size={batch_size}", f"--seq_len={seq_len}", "--eval_batches=1", *overrides])
    task = task_for(cfg)
    layout, params, state = ParamLayout.split(task.build_model(nnx.Rngs(params=cfg.train.seed)))
    dataset = task.make_dataset()

    @jax.jit
    def forward(params, state, batch):
        model = layout.merge(params, state)
        model.eval()
        return task.forward(model, batch)

    timed = []
    clock = StepClock(0, steps, task.items_per_batch())  # its warm-up and new-shape rule, not its timing
    for step in range(steps):
        batch = jax.tree.map(lambda a: a[0], dataset.train_batch(step, 1))
        new_shape = clock.runs_alone(step, batch)
        began = time.perf_counter()
        jax.block_until_ready(forward(params, state, jax.device_put(batch)))
        if step >= clock.timed_after and not new_shape:
            timed.append(time.perf_counter() - began)
    if not timed:
        raise RuntimeError(f"every step after the warm-up ran a new batch shape: run more than {steps} steps")
    if hasattr(dataset, "close"):
        dataset.close()
    items = task.items_per_batch()
    peak = peak_memory_bytes()
    return {
        "config": config,
        "framework": "jax",
        "mode": "inference",
        "device": jax.devices()[0].device_kind,
        "compute_dtype": str(np.dtype(compute_dtype_for(cfg.model))),
        "unit": task.unit,
        "items_per_s": items * len(timed) / sum(timed),
        "timed_steps": len(timed),
        "peak_memory_gib": peak / 2**30 if peak else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.throughput.inference",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=2048)
    args, overrides = parse_args_with_overrides(parser, argv)
    print(json.dumps(measure(args.config, args.steps, args.batch_size, args.seq_len, overrides)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
