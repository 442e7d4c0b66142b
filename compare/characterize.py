"""Where a training step's GPU time goes, by operator class and pass, in JAX and in the PyTorch reference, from the
profilers: ``python -m compare.characterize --config NAME [--framework jax|torch|both] [--steps K] [--out DIR]``.

For any training config of any family, on the same config, precision and batches in each framework:

- JAX: the training loop's own jit step, compiled once, warmed up, then traced (``compare.step_profile``). A
  kernel's pass is backward when its op scope is under JAX's ``transpose(...)`` (or a Pallas kernel is named
  ``*_bwd*``), optimizer under the train step's ``optimizer`` scope, else forward.
- PyTorch: ``torch_reference.step_profile`` in its own process (``train_bench``'s runner at the reference's best
  settings under ``torch.profiler``); a kernel's pass is the ``pass:`` range in which the CPU launched it.

Every kernel is classified by the one table of ``compare.kernel_classes`` (GEMM, SSM, attention, convolution,
normalization, elementwise/fusion, reduction, optimizer, copy/other); the unclassified share is reported, never
hidden. Writes ``characterization.json`` (every number) and ``report.md`` under
``reports/<config>/<device>-<date>/`` (or ``--out``), with the operator breakdown as stacked bars
(``breakdown.png``). Not built yet: Nsight Compute counters, the roofline and bandwidth plots."""

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

import jax

from compare.characterize_plots import breakdown_bars
from compare.kernel_classes import CATEGORIES, UNCLASSIFIED, classify
from compare.step_profile import StepProfile, common_shape_batches, profile_steps
from compare.train_throughput import json_line
from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from jax_mamba.train.step import init_training

PHASES = ("forward", "backward", "optimizer", "other")
FRAMEWORKS = ("jax", "torch", "both")


def phase_of(kernel: str, scope: str) -> str:
    """A JAX kernel's pass: forward, backward or optimizer, by the op's scope (XLA kernels) or name (Pallas)."""
    if "optimizer" in scope:
        return "optimizer"
    if "transpose(" in scope or "_bwd" in kernel:
        return "backward"
    return "forward"


def summarize(rows: list[tuple[str, float, str, str]], top: int = 40) -> dict:
    """rows (kernel, us per step, pass, op scope or "") -> per step, in ms: every category, every pass x category,
    the unclassified share, and the ``top`` kernels."""
    by_category = dict.fromkeys((*CATEGORIES, UNCLASSIFIED), 0.0)
    by_phase = {phase: dict.fromkeys((*CATEGORIES, UNCLASSIFIED), 0.0) for phase in PHASES}
    kernels = []
    for kernel, us, phase, scope in rows:
        category = classify(kernel, scope)
        by_category[category] += us / 1e3
        by_phase[phase][category] += us / 1e3
        kernels.append({"kernel": kernel, "us": us, "category": category, "phase": phase, "scope": scope})
    total = sum(by_category.values())
    return {
        "device_ms": total,
        "categories_ms": by_category,
        "phases_ms": by_phase,
        "unclassified_share": by_category[UNCLASSIFIED] / total if total else 0.0,
        "kernels": sorted(kernels, key=lambda k: -k["us"])[:top],
    }


def jax_rows(profile: StepProfile) -> list[tuple[str, float, str, str]]:
    """One row per kernel and launching HLO instruction where the trace names it (a cuBLAS GEMM of the backward
    then gets the instruction's ``transpose(...)`` scope), else per kernel by its own name."""
    rows = []
    for (kernel, op), us in profile.launches_us.items():
        scope = profile.scopes.get(op) or profile.scopes.get(kernel, "")
        rows.append((kernel, us, phase_of(kernel, scope), scope))
    return rows


def torch_rows(passes_us: dict[str, dict[str, float]]) -> list[tuple[str, float, str, str]]:
    """``torch_reference.step_profile``'s {pass: {kernel: us}} -> rows (PyTorch kernels carry no op scope)."""
    return [(kernel, us, phase, "") for phase, kernels in passes_us.items() for kernel, us in kernels.items()]


def characterize_jax(config: str, overrides: list[str], steps: int) -> dict:
    cfg = load_config(config, overrides)
    task = task_for(cfg)
    dataset = task.make_dataset()
    try:
        candidates = [dataset.train_batch(s, cfg.train.grad_accum_steps) for s in range(4 * steps)]
        batches = common_shape_batches(candidates, steps)
        profile = profile_steps(init_training(cfg, task), batches)
    finally:
        if hasattr(dataset, "close"):
            dataset.close()
    device = jax.devices()[0]
    return {
        "framework": "jax",
        "version": f"jax {jax.__version__}",
        "device": getattr(device, "device_kind", str(device)),
        "steps_profiled": profile.steps,
        "step_wall_ms": profile.step_wall_ms,
        **summarize(jax_rows(profile)),
    }


def characterize_torch(config: str, overrides: list[str], steps: int) -> dict:
    """The PyTorch reference in its own process (so the two frameworks never share the GPU's memory)."""
    command = [sys.executable, "-m", "torch_reference.step_profile", "--config", config, f"--steps={steps}"]
    result = json_line([*command, *overrides])
    if result["returncode"] != 0:
        raise SystemExit(f"the PyTorch side failed ({' '.join(command[1:])}):\n{result['error']}")
    return {
        "framework": "torch",
        "version": f"torch {result['torch']}; {result['reference']}; {result['settings']}",
        "device": result["device"],
        "steps_profiled": result["steps_profiled"],
        "step_wall_ms": result["step_wall_ms"],
        **summarize(torch_rows(result["passes_us"])),
    }


def markdown(config: str, sides: list[dict], command: str) -> str:
    """The report: command and versions, categories side by side (ms per step, share), then each side's passes and
    top kernels."""
    lines = [f"# Training-step characterization: {config}", "", f"Command: `{command}`", ""]
    for side in sides:
        lines.append(
            f"- {side['framework']}: {side['device']}, {side['version']}; {side['steps_profiled']} profiled steps "
            f"after warm-up, wall {side['step_wall_ms']:.2f} ms per step, kernels {side['device_ms']:.2f} ms, "
            f"unclassified {100 * side['unclassified_share']:.1f}%"
        )
    lines += ["", "| category | " + " | ".join(f"{s['framework']} ms | share" for s in sides) + " |"]
    lines.append("|---|" + "---|---|" * len(sides))
    for category in (*CATEGORIES, UNCLASSIFIED):
        cells = []
        for side in sides:
            ms = side["categories_ms"][category]
            cells.append(f"{ms:.3f} | {100 * ms / max(side['device_ms'], 1e-12):.1f}%")
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    for side in sides:
        lines += ["", f"## {side['framework']}: by pass (ms per step)", ""]
        lines += ["| category | " + " | ".join(PHASES) + " |", "|---|" + "---|" * len(PHASES)]
        for category in (*CATEGORIES, UNCLASSIFIED):
            by_pass = " | ".join(f"{side['phases_ms'][p][category]:.3f}" for p in PHASES)
            lines.append(f"| {category} | {by_pass} |")
        lines += ["", "| kernel | us | category | pass |", "|---|---|---|---|"]
        for k in side["kernels"]:
            lines.append(f"| `{k['kernel'][:90]}` | {k['us']:.1f} | {k['category']} | {k['phase']} |")
    return "\n".join(lines) + "\n"


def report_dir(root: Path, config: str, device: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    return root / Path(config).stem / f"{slug}-{datetime.date.today().isoformat()}"


def write_report(config: str, sides: list[dict], out: Path, command: str, overrides: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {"config": config, "overrides": overrides, "command": command, "sides": sides}
    (out / "characterization.json").write_text(json.dumps(record, indent=2))
    (out / "report.md").write_text(markdown(config, sides, command))
    breakdown_bars(sides, out / "breakdown.png", f"{config}: where a training step's GPU time goes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.characterize", description=__doc__)
    parser.add_argument("--config", required=True, help="bundled config name or YAML path")
    parser.add_argument("--framework", default="both", choices=FRAMEWORKS)
    parser.add_argument("--steps", type=int, default=8, help="profiled training steps (after a warm-up pass)")
    parser.add_argument("--out", type=Path, help="report folder (default reports/<config>/<device>-<date>/)")
    args, overrides = parse_args_with_overrides(parser, argv)
    if args.steps < 1:
        raise SystemExit(f"--steps: expected a positive integer, got {args.steps}")
    if jax.default_backend() != "gpu":
        raise SystemExit("compare.characterize profiles GPU kernels: JAX sees no GPU")
    sides = []
    for framework, characterize in (("jax", characterize_jax), ("torch", characterize_torch)):
        if args.framework in (framework, "both"):
            print(f"profiling {framework} ...", flush=True)
            sides.append(characterize(args.config, overrides, args.steps))
            print(f"{framework}: {sides[-1]['step_wall_ms']:.2f} ms per step", flush=True)
    out = args.out or report_dir(Path("reports"), args.config, sides[0]["device"])
    command = "python -m compare.characterize " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report(args.config, sides, out, command, overrides)
    print(markdown(args.config, sides, command).split("\n## ")[0])
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
