"""Per-kernel device time of the PyTorch reference's training step, by pass:
``python -m torch_reference.step_profile --config NAME [--steps K] [--warmup W] [--device cuda|cpu]``.

The PyTorch side of ``compare.characterize``: the same runner as ``train_bench`` (mamba-ssm, NVlabs' MambaVision or
our Graph-Mamba on torch_geometric; bf16 autocast, fused AdamW, cudnn.benchmark) runs ``warmup`` steps, then
``steps`` steps under ``torch.profiler`` (CPU and CUDA activity). Each CUDA kernel is credited to the pass
(forward, backward, optimizer: the runner's ``pass:`` ranges) during which the CPU launched it, and to "other"
outside them. Prints one JSON line: {pass: {kernel: us per step}}, the wall time per step and the settings."""

import argparse
import collections
import json
import sys
import time

import torch

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from torch_reference.backend import load
from torch_reference.train_bench import PASS_RANGE, make_runner


def kernels_by_pass(events, steps: int) -> dict[str, dict[str, float]]:
    """{pass: {kernel name: device us per step}} from profiler FunctionEvents: each event's launched ``kernels``
    (name, device, duration in us) go to the pass range that contains the event's start on the CPU."""
    ranges = [
        (e.time_range.start, e.time_range.end, e.name[len(PASS_RANGE) :])
        for e in events
        if e.name.startswith(PASS_RANGE)
    ]
    result: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    for event in events:
        if not event.kernels:
            continue
        start = event.time_range.start
        phase = next((name for begin, end, name in ranges if begin <= start <= end), "other")
        for kernel in event.kernels:
            result[phase][kernel.name] += kernel.duration / steps
    return {phase: dict(kernels) for phase, kernels in result.items()}


def profile(config: str, overrides: list[str], steps: int, warmup: int, device: str = "cuda") -> dict:
    cfg = load_config(config, ["--eval_batches=1", *overrides])
    ref = load(device)
    runner = make_runner(ref, cfg)
    runner.model.train()
    dataset = task_for(cfg).make_dataset()
    try:
        for step in range(warmup):
            runner.train_step(runner.inputs(dataset.train_batch(step, 1))).item()
        inputs = [runner.inputs(dataset.train_batch(warmup + i, 1)) for i in range(steps)]
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
            torch.cuda.synchronize()
        began = time.perf_counter()
        with torch.profiler.profile(activities=activities) as prof:
            for batch in inputs:
                runner.train_step(batch).item()  # synchronizes, as the throughput runs do
        wall = (time.perf_counter() - began) / steps
    finally:
        if hasattr(dataset, "close"):
            dataset.close()
    return {
        "config": config,
        "framework": "torch",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "reference": ref.describe(),
        "settings": "bf16 autocast, " + ("fused AdamW, cudnn.benchmark" if device == "cuda" else "AdamW"),
        "steps_profiled": steps,
        "step_wall_ms": wall * 1e3,  # under the profiler
        "passes_us": kernels_by_pass(prof.events(), steps),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_reference.step_profile", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3, help="unprofiled steps first (autotuning, allocation)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the reference's CPU fallback")
    args, overrides = parse_args_with_overrides(parser, argv)
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit(f"--steps >= 1 and --warmup >= 0 expected, got {args.steps} and {args.warmup}")
    print(json.dumps(profile(args.config, overrides, args.steps, args.warmup, args.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
