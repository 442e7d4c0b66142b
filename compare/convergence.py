"""Training-curve parity with mamba-ssm: ``python -m compare.convergence --config NAME --steps N``.

JAX trains the config twice (``train.seed`` s and s + 1: the spread between two seeds of one framework is the
yardstick), mamba-ssm once (``torch_reference.train_curve``) from the very weights our loop initializes with seed s,
on the same batches, with the same learning-rate schedule, clipping and AdamW settings (fused AdamW and mamba-ssm's
fused kernels on a GPU; no torch.compile). Each run is its own process. Writes ``<out>.json`` (every step's loss),
``<out>.md`` and ``<out>.png`` (the curves overlaid, and the per-step differences).

Agreement: over the second half of the run, the mean absolute difference between the smoothed curves (a moving
average over ``--window`` steps) of JAX and mamba-ssm from the same seed is no larger than that between the two JAX
seeds. Other ``--key=value`` arguments override the config on both sides (e.g. ``--warmup_steps=30``).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from compare.outputs import output_path
from jax_mamba.configs.loader import load_config, parse_args_with_overrides


def jax_curve(config: str, steps: int, seed: int, extra: list[str], workdir: Path) -> list[float]:
    """Every step's training loss of ``python -m jax_mamba.train`` (logging each step)."""
    run_dir = workdir / f"jax-seed{seed}"
    command = [
        sys.executable, "-m", "jax_mamba.train", "--config", config, f"--run_dir={run_dir}", f"--max_steps={steps}",
        f"--seed={seed}", "--log_every=1", f"--eval_every={steps}", f"--save_every={steps}", "--eval_batches=1",
        "--progress=false", "--sample_tokens=0", *extra,
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"JAX run (seed {seed}) failed:\n{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    by_step = {r["step"]: r["loss"] for r in records if "loss" in r and "event" not in r}
    return [by_step[k] for k in range(1, steps + 1)]


def torch_curve(config: str, steps: int, seed: int, extra: list[str], device: str) -> dict:
    command = [
        sys.executable, "-m", "torch_reference.train_curve", "--config", config, f"--steps={steps}",
        f"--device={device}", f"--seed={seed}", *extra,
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"mamba-ssm run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def smooth(losses: list[float], window: int) -> np.ndarray:
    """Trailing moving average over ``window`` steps (the first points average what exists so far)."""
    values = np.asarray(losses, np.float64)
    sums = np.concatenate([[0.0], np.cumsum(values)])
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def agreement(jax_a: list[float], jax_b: list[float], reference: list[float], window: int) -> dict:
    """Mean |difference| of the smoothed curves over the second half: framework gap vs seed spread."""
    half = len(jax_a) // 2
    a, b, r = (smooth(c, window)[half:] for c in (jax_a, jax_b, reference))
    framework_gap, seed_spread = float(np.mean(np.abs(a - r))), float(np.mean(np.abs(a - b)))
    return {
        "framework_gap": framework_gap,
        "seed_spread": seed_spread,
        "first_step_difference": abs(jax_a[0] - reference[0]),
        "agree": framework_gap <= seed_spread,
    }


def plot(path: Path, curves: dict[str, list[float]], window: int, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (name_a, a), (name_b, b), (name_r, r) = curves.items()
    steps = np.arange(1, len(a) + 1)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, height_ratios=[2, 1])
    for name, curve, style in ((name_a, a, "-"), (name_b, b, ":"), (name_r, r, "--")):
        top.plot(steps, curve, style, alpha=0.25)
        top.plot(steps, smooth(curve, window), style, label=name)
    top.set_ylabel("training loss")
    top.set_title(title)
    top.legend()
    bottom.plot(steps, smooth(a, window) - smooth(r, window), label=f"{name_a} - {name_r}")
    bottom.plot(steps, smooth(a, window) - smooth(b, window), ":", label=f"{name_a} - {name_b}")
    bottom.axhline(0.0, color="grey", linewidth=0.5)
    bottom.set_xlabel("step")
    bottom.set_ylabel(f"difference ({window}-step mean)")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out: Path, result: dict) -> list[str]:
    v = result["verdict"]
    lines = [
        f"# Training-curve parity: {result['config']} ({result['device']}, {result['date']})",
        "",
        f"Command: `{result['command']}`",
        "",
        f"{result['steps']} steps from the same initial weights (JAX seed {result['seed']}'s), the same batches, "
        f"schedule, clipping and AdamW settings. mamba-ssm: {result['torch']['reference']}; settings: "
        f"{result['torch']['settings']}. JAX: jax {result['jax']}.",
        "",
        "| | loss at step 1 | final loss (last {w}-step mean) |".format(w=result["window"]),
        "|---|---|---|",
    ]
    for name, curve in result["curves"].items():
        lines.append(f"| {name} | {curve[0]:.4f} | {np.mean(curve[-result['window'] :]):.4f} |")
    lines += [
        "",
        f"Second half of the run, mean |difference| of the {result['window']}-step means: JAX vs mamba-ssm "
        f"{v['framework_gap']:.4f}, JAX seed {result['seed']} vs seed {result['seed'] + 1} {v['seed_spread']:.4f}: "
        + ("**the curves agree** (the framework gap is within the seed spread)." if v["agree"] else "**they do not**."),
        f"Step 1 (same weights, same batch): |JAX - mamba-ssm| = {v['first_step_difference']:.2e}.",
        "",
        f"![curves]({output_path(out, '.png').name})",
    ]
    output_path(out, ".md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.convergence", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0, help="JAX runs seeds s and s + 1; mamba-ssm starts from s")
    parser.add_argument("--window", type=int, default=20, help="steps in the moving average")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="the PyTorch side's device")
    parser.add_argument("--out", required=True, help="output path without suffix (.json, .md, .png)")
    args, extra = parse_args_with_overrides(parser, argv)
    load_config(args.config, extra)  # refuse a bad config or override before any run starts
    if args.steps < 2 or args.window < 1:
        raise SystemExit("--steps must be >= 2 and --window >= 1")
    import jax

    with tempfile.TemporaryDirectory() as tmp:
        curves = {
            f"JAX seed {s}": jax_curve(args.config, args.steps, s, extra, Path(tmp)) for s in (args.seed, args.seed + 1)
        }
    reference = torch_curve(args.config, args.steps, args.seed, extra, args.device)
    curves[f"mamba-ssm seed {args.seed}"] = reference["losses"]
    a, b, r = curves.values()
    result = {
        "config": args.config,
        "device": getattr(jax.devices()[0], "device_kind", str(jax.devices()[0])),
        "date": time.strftime("%Y-%m-%d"),
        "jax": jax.__version__,
        "command": " ".join(["python -m compare.convergence", *(argv if argv is not None else sys.argv[1:])]),
        "steps": args.steps,
        "seed": args.seed,
        "window": args.window,
        "overrides": extra,
        "torch": {k: v for k, v in reference.items() if k != "losses"},
        "verdict": agreement(a, b, r, args.window),
        "curves": curves,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_path(out, ".json").write_text(json.dumps(result, indent=2))
    plot(output_path(out, ".png"), curves, args.window, f"{args.config}: JAX and mamba-ssm")
    print("\n".join(write_report(out, result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
