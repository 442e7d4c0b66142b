"""JAX inference throughput of a config: ``python -m compare.inference_bench --config NAME [--batch_size B]``.

The JAX side of ``compare.train_throughput --inference``: the model in eval mode (running statistics, no dropout),
one jit-compiled forward per batch of the config's data, synchronized after each as the PyTorch side is. Prints one
JSON line: mean items/s (tokens or images) over the steps after the first three (compilation, warm-up) and the
device's peak memory in use."""

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
    warmup = min(3, steps - 1)  # the first call compiles; as the PyTorch side, the first three are left out
    for step in range(steps):
        batch = jax.tree.map(lambda a: a[0], dataset.train_batch(step, 1))
        began = time.perf_counter()
        jax.block_until_ready(forward(params, state, jax.device_put(batch)))
        if step >= warmup:
            timed.append(time.perf_counter() - began)
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
        "peak_memory_gib": peak / 2**30 if peak else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.inference_bench",
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
