"""The reference's gradient of one batch, computed several times in one process:
``python -m torch_reference.gradient_repeats --config NAME --repeats N --out_dir DIR``.

The PyTorch side of ``compare.convergence.determinism``: the training runner of ``train_bench`` (mamba-ssm's fused
kernels, bf16 autocast where our side computes in bf16) from our initial weights (``train_curve.reference_runner``), the
forward and backward of step ``--step``'s batch ``--repeats`` times, gradients cleared in between. Writes each
repeat's gradients (float32, by the reference's parameter names) to ``DIR/repeat-R.npz`` and prints one JSON line
with the losses and what was run."""

import argparse
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # JAX only builds the initial weights here; the GPU is torch's

from pathlib import Path

import numpy as np

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from torch_reference.curve_config import check_curve_config
from torch_reference.train_curve import reference_runner


def gradient_repeats(config: str, overrides: list[str], repeats: int, step: int, out_dir: Path, device: str) -> dict:
    cfg = load_config(config, overrides)
    check_curve_config(cfg)
    ref, runner = reference_runner(cfg, device)
    inputs = runner.inputs(task_for(cfg).make_dataset().train_batch(step, 1))
    out_dir.mkdir(parents=True, exist_ok=True)
    losses = []
    for repeat in range(repeats):
        runner.optimizer.zero_grad(set_to_none=True)
        losses.append(runner.backward(inputs).item())
        grads = {n: p.grad.float().cpu().numpy() for n, p in runner.module.named_parameters() if p.grad is not None}
        np.savez(out_dir / f"repeat-{repeat}.npz", **grads)
    return {"framework": "torch", "reference": ref.describe(), "settings": runner.settings(), "losses": losses}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_reference.gradient_repeats", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step", type=int, default=0, help="whose batch (the dataset is a function of seed and step)")
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args, overrides = parse_args_with_overrides(parser, argv)
    result = gradient_repeats(args.config, overrides, args.repeats, args.step, Path(args.out_dir), args.device)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
