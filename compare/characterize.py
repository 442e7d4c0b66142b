"""Where a training step's GPU time goes, by operator class and pass, from the profiler:
``python -m compare.characterize --config NAME [--steps K] [--out DIR]``.

For any training config of any family: the training loop's own jit step (same config, precision and batches),
compiled once, warmed up, then traced (``compare.step_profile``). Every kernel is classified by the one table of
``compare.kernel_classes`` (GEMM, SSM, attention, convolution, normalization, elementwise/fusion, reduction,
optimizer, copy/other; the unclassified share is reported, never hidden) and assigned to a pass: backward (its op
scope is under JAX's ``transpose(...)``, or a Pallas kernel named ``*_bwd*``), optimizer (the ``optimizer`` scope of
the train step) or forward. Writes ``characterization.json`` (every number) and ``report.md`` under
``reports/<config>/<device>-<date>/`` (or ``--out``).

This is the JAX side of the characterization reports; the PyTorch side (torch.profiler), Nsight Compute counters
and the plots are not built yet."""

import argparse
import collections
import datetime
import json
import re
import sys
from pathlib import Path

import jax

from compare.kernel_classes import CATEGORIES, UNCLASSIFIED, classify
from compare.step_profile import StepProfile, profile_steps
from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from jax_mamba.train.step import init_training

PHASES = ("forward", "backward", "optimizer")


def phase_of(kernel: str, scope: str) -> str:
    """forward, backward or optimizer: by the op's scope (XLA kernels), by the kernel's name (Pallas kernels)."""
    if "optimizer" in scope:
        return "optimizer"
    if "transpose(" in scope or re.search(r"_bwd", kernel):
        return "backward"
    return "forward"


def summarize(profile: StepProfile, top: int = 40) -> dict:
    """Per step, in ms: every category, every pass x category, the unclassified share, and the ``top`` kernels."""
    by_category = dict.fromkeys((*CATEGORIES, UNCLASSIFIED), 0.0)
    by_phase = {phase: dict.fromkeys((*CATEGORIES, UNCLASSIFIED), 0.0) for phase in PHASES}
    kernels = []
    for kernel, us in profile.kernel_us.items():
        scope = profile.scopes.get(kernel, "")
        category, phase = classify(kernel, scope), phase_of(kernel, scope)
        by_category[category] += us / 1e3
        by_phase[phase][category] += us / 1e3
        kernels.append({"kernel": kernel, "us": us, "category": category, "phase": phase, "scope": scope})
    total = sum(by_category.values())
    return {
        "steps_profiled": profile.steps,
        "step_wall_ms": profile.step_wall_ms,
        "device_ms": total,
        "categories_ms": by_category,
        "phases_ms": by_phase,
        "unclassified_share": by_category[UNCLASSIFIED] / total if total else 0.0,
        "kernels": sorted(kernels, key=lambda k: -k["us"])[:top],
    }


def _common_shape_batches(dataset, steps: int, accum: int) -> list:
    """``steps`` batches of the most common shape among the first 4 x steps (graph batches come in a few shapes)."""
    shape_of = lambda batch: tuple(sorted((k, v.shape) for k, v in batch.items()))  # noqa: E731
    batches = [dataset.train_batch(s, accum) for s in range(4 * steps)]
    common = collections.Counter(shape_of(b) for b in batches).most_common(1)[0][0]
    return [jax.device_put(b) for b in batches if shape_of(b) == common][:steps]


def characterize_jax(config: str, overrides: list[str], steps: int) -> dict:
    cfg = load_config(config, overrides)
    task = task_for(cfg)
    dataset = task.make_dataset()
    try:
        batches = _common_shape_batches(dataset, steps, cfg.train.grad_accum_steps)
        summary = summarize(profile_steps(init_training(cfg, task), batches))
    finally:
        if hasattr(dataset, "close"):
            dataset.close()
    device = jax.devices()[0]
    return {
        "framework": "jax",
        "jax": jax.__version__,
        "config": config,
        "overrides": overrides,
        "device": getattr(device, "device_kind", str(device)),
        "compute_dtype": getattr(cfg.model, "compute_dtype", "auto"),
        **summary,
    }


def markdown(result: dict, command: str) -> str:
    """The report: command, device, then categories by pass and the top kernels."""
    total = max(result["device_ms"], 1e-12)
    lines = [
        f"# Training-step characterization: {result['config']} ({result['framework']})",
        "",
        f"{result['device']}, jax {result['jax']}, {result['steps_profiled']} profiled steps after warm-up. "
        f"Wall {result['step_wall_ms']:.2f} ms per step, kernels {result['device_ms']:.2f} ms; unclassified "
        f"{100 * result['unclassified_share']:.1f}%.",
        f"Command: `{command}`",
        "",
        "| category | " + " | ".join(PHASES) + " | total ms | share |",
        "|---|" + "---|" * (len(PHASES) + 2),
    ]
    for category, ms in sorted(result["categories_ms"].items(), key=lambda kv: -kv[1]):
        phases = " | ".join(f"{result['phases_ms'][p][category]:.3f}" for p in PHASES)
        lines.append(f"| {category} | {phases} | {ms:.3f} | {100 * ms / total:.1f}% |")
    lines += ["", "| kernel | us | category | pass |", "|---|---|---|---|"]
    for k in result["kernels"]:
        lines.append(f"| `{k['kernel'][:90]}` | {k['us']:.1f} | {k['category']} | {k['phase']} |")
    return "\n".join(lines) + "\n"


def report_dir(root: Path, config: str, device: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    return root / Path(config).stem / f"{slug}-{datetime.date.today().isoformat()}"


def write_report(result: dict, out: Path, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "characterization.json").write_text(json.dumps({**result, "command": command}, indent=2))
    (out / "report.md").write_text(markdown(result, command))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.characterize", description=__doc__)
    parser.add_argument("--config", required=True, help="bundled config name or YAML path")
    parser.add_argument("--steps", type=int, default=8, help="profiled training steps (after a warm-up pass)")
    parser.add_argument("--out", type=Path, help="report folder (default reports/<config>/<device>-<date>/)")
    args, overrides = parse_args_with_overrides(parser, argv)
    if args.steps < 1:
        raise SystemExit(f"--steps: expected a positive integer, got {args.steps}")
    if jax.default_backend() != "gpu":
        raise SystemExit("compare.characterize profiles GPU kernels: JAX sees no GPU")
    result = characterize_jax(args.config, overrides, args.steps)
    out = args.out or report_dir(Path("reports"), args.config, result["device"])
    command = "python -m compare.characterize " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report(result, out, command)
    print(markdown(result, command).split("\n| kernel |")[0])
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
