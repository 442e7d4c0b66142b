"""The PyTorch reference's training curve from our initial weights: ``python -m torch_reference.train_curve``.

The PyTorch side of ``compare.convergence``. The model starts from the weights our training loop initializes for the
same config and ``train.seed`` (built by JAX on the CPU, converted by ``torch_reference.convert``), trains on the
same batches (the dataset is a function of seed and step), with the same learning-rate schedule (the runner's
``LambdaLR`` of our ``learning_rate_schedule``: linear warmup, cosine decay), clipping and AdamW settings, and mamba-ssm
at its best settings (``train_bench``'s runner: fused AdamW and its fused kernels on a GPU; bf16 autocast where our
side computes in bf16). Prints one JSON line with the loss of every step."""

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # JAX only builds the initial weights here; the GPU is torch's

import numpy as np
import torch

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from jax_mamba.train.step import initial_variables
from torch_reference.backend import load
from torch_reference.convert import to_torch_state_dict
from torch_reference.train_bench import make_runner


def initial_state_dict(cfg) -> dict[str, torch.Tensor]:
    """Our training loop's initial parameters for cfg (``train.step.initial_variables``), as a mamba-ssm state
    dict."""
    _, params, _, _, _ = initial_variables(cfg, task_for(cfg))
    arrays = {k: np.asarray(v, np.float32) for k, v in params.items()}
    return {k: torch.from_numpy(np.array(v)) for k, v in to_torch_state_dict(arrays, cfg.model).items()}


def train_curve(config: str, steps: int, overrides: list[str], device: str = "cuda") -> dict:
    cfg = load_config(config, [f"--max_steps={steps}", *overrides])
    if cfg.family != "lm" or cfg.train.grad_accum_steps != 1:
        raise SystemExit("train_curve: language models with train.grad_accum_steps=1")
    ref = load(device)
    runner = make_runner(ref, cfg)
    missing, unexpected = runner.model.load_state_dict(initial_state_dict(cfg), strict=False)
    if missing or [k for k in unexpected if k != "lm_head.weight"]:
        raise RuntimeError(f"initial weights do not fit mamba-ssm's model: missing {missing}, unexpected {unexpected}")
    dataset = task_for(cfg).make_dataset()
    losses = []
    for step in range(steps):  # the runner's scheduler follows our schedule over train.max_steps
        losses.append(runner.train_step(runner.inputs(dataset.train_batch(step, 1))).item())
    return {
        "config": config,
        "framework": "torch",
        "reference": ref.describe(),
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
