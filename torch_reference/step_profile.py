"""Per-kernel device time of the PyTorch reference's training step, by pass:
``python -m torch_reference.step_profile --config NAME [--steps K] [--warmup W] [--device cuda|cpu] [--trace PATH]``.

The PyTorch side of ``compare.characterize``: the same runner as ``train_bench`` (mamba-ssm, NVlabs' MambaVision or
our Graph-Mamba on torch_geometric; bf16 autocast, fused AdamW, cudnn.benchmark) runs ``warmup`` steps, times
``steps`` steps by wall clock, then runs them again under ``torch.profiler`` (CPU and CUDA activity), synchronizing
at the end of each pass so that each kernel is credited to its pass by GPU time (``trace_passes``). Prints one JSON
line: {pass: {kernel: us per step}}, launches per kernel per step, the wall time per step outside the profiler and
the settings. ``--trace``: keep the trimmed trace (JSON). ``--ncu-window``: the Nsight Compute target instead: warm
up, then one step inside ``cudaProfilerStart``/``Stop``, nothing printed. ``--mode``: the step's execution
(``torch_reference.step_modes``); under ``cuda_graph`` the replayed step runs no Python, so its kernels are credited
to "other", not to passes."""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from torch_reference.backend import load
from torch_reference.step_modes import MODES, step_function
from torch_reference.trace_passes import kernels_by_pass, trimmed
from torch_reference.train_bench import make_runner


def _run(step, inputs: list) -> float:
    """Seconds per step over ``inputs`` (each step ends with the loss read back, as the throughput runs do)."""
    began = time.perf_counter()
    for batch in inputs:
        step(batch).item()
    return (time.perf_counter() - began) / len(inputs)


def profile(
    config: str,
    overrides: list[str],
    steps: int,
    warmup: int,
    device: str = "cuda",
    trace: Path | None = None,
    ncu_window: bool = False,
    mode: str = "eager",
) -> dict:
    cfg = load_config(config, ["--eval_batches=1", *overrides])
    ref = load(device)
    runner = make_runner(ref, cfg, mode)
    runner.model.train()
    step_fn = step_function(runner, mode)
    dataset = task_for(cfg).make_dataset()
    try:
        for step in range(warmup):
            step_fn(runner.inputs(dataset.train_batch(step, 1))).item()
        inputs = [runner.inputs(dataset.train_batch(warmup + i, 1)) for i in range(steps)]
    finally:
        if hasattr(dataset, "close"):
            dataset.close()
    if ncu_window:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # ncu saves and restores all allocated memory around every replay
        torch.cuda.cudart().cudaProfilerStart()
        _run(step_fn, inputs[:1])
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        return {}
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    wall = _run(step_fn, inputs)
    runner.sync_passes = mode != "cuda_graph"  # a replayed graph runs no Python: its kernels fall under "other"
    with torch.profiler.profile(activities=activities) as prof:
        _run(step_fn, inputs)
    runner.sync_passes = False
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        record = json.loads(path.read_text())
    if trace is not None:
        trace.write_text(json.dumps(trimmed(record)))
    passes_us, launches = kernels_by_pass(record, steps)
    return {
        "config": config,
        "framework": "torch",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "reference": ref.describe(),
        "settings": runner.settings() + (", cudnn.benchmark" if device == "cuda" else ""),
        "mode": mode,
        "steps_profiled": steps,
        "step_wall_ms": wall * 1e3,  # outside the profiler
        "passes_us": passes_us,
        "launches": launches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_reference.step_profile", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3, help="unprofiled steps first (autotuning, allocation)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the reference's CPU fallback")
    parser.add_argument("--trace", type=Path, help="write the trimmed profiler trace (JSON) here")
    parser.add_argument("--ncu-window", action="store_true", help="be Nsight Compute's target (see above)")
    parser.add_argument("--mode", default="eager", choices=list(MODES), help="execution (torch_reference.step_modes)")
    args, overrides = parse_args_with_overrides(parser, argv)
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit(f"--steps >= 1 and --warmup >= 0 expected, got {args.steps} and {args.warmup}")
    result = profile(
        args.config, overrides, args.steps, args.warmup, args.device, args.trace, args.ncu_window, args.mode
    )
    if not args.ncu_window:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
