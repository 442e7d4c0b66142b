"""The PyTorch reference's training curve from our initial weights: ``python -m torch_reference.train_curve``.

The PyTorch side of ``compare.convergence``. The model starts from the weights our training loop initializes for the
same config and ``train.seed`` (built by JAX on the CPU, converted by the family's table), trains on the same batches
(the dataset is a function of seed and step), with the same learning-rate schedule (the runner's ``LambdaLR`` of our
``learning_rate_schedule``: linear warmup, cosine decay), clipping and AdamW settings, and the reference at its best
settings (``train_bench``'s runner: mamba-ssm's ``MambaLMHeadModel`` or NVlabs' ``MambaVision``, fused AdamW and
mamba-ssm's fused kernels on a GPU; bf16 autocast where our side computes in bf16). Prints one JSON line with the
loss of every step.

Language models and MambaVision, with AdamW and no dropout or stochastic depth (``curve_config.check_curve_config``
refuses the rest)."""

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # JAX only builds the initial weights here; the GPU is torch's

import numpy as np
import torch

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.configs.schema import RunConfig
from jax_mamba.tasks import task_for
from jax_mamba.train.step import initial_variables
from torch_reference.backend import load
from torch_reference.curve_config import check_curve_config
from torch_reference.train_bench import make_runner


def our_initial_variables(cfg: RunConfig) -> tuple[dict, dict]:
    """(params, state) of our training loop's new run of cfg (``train.step.initial_variables``), as numpy."""
    _, params, state, _, _ = initial_variables(cfg, task_for(cfg))
    return {k: np.asarray(v) for k, v in params.items()}, {k: np.asarray(v) for k, v in state.items()}


def reference_runner(cfg: RunConfig, device: str):
    """The reference's training runner for cfg, holding our initial weights, in training mode."""
    ref = load(device)
    runner = make_runner(ref, cfg)
    runner.load_ours(*our_initial_variables(cfg))
    runner.model.train()
    return ref, runner


def train_curve(config: str, steps: int, overrides: list[str], device: str = "cuda") -> dict:
    cfg = load_config(config, [f"--max_steps={steps}", *overrides])
    check_curve_config(cfg)
    ref, runner = reference_runner(cfg, device)
    dataset = task_for(cfg).make_dataset()
    losses = []
    for step in range(steps):  # the runner's scheduler follows our schedule over train.max_steps
        losses.append(runner.train_step(runner.inputs(dataset.train_batch(step, 1))).item())
    return {
        "config": config,
        "framework": "torch",
        "reference": ref.describe(),
        "device": torch.cuda.get_device_name() if ref.device == "cuda" else "cpu",
        "settings": runner.settings(),
        "seed": cfg.train.seed,
        "losses": losses,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_reference.train_curve", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the reference's CPU fallback")
    args, overrides = parse_args_with_overrides(parser, argv)
    print(json.dumps(train_curve(args.config, args.steps, overrides, args.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
