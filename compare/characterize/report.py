"""Where a training step's GPU time goes, by operator class and pass, in JAX and in the PyTorch reference, from the
profilers: ``python -m compare.characterize --config NAME [--framework jax|torch|both] [--steps K] [--ncu]
[--out DIR]``.

For any training config of any family, on the same config, precision and batches in each framework:

- JAX: the training loop's own jit step, compiled once, warmed up, timed, then traced
  (``compare.characterize.step_profile``), with XLA's command buffers off so that each kernel names the HLO
  instruction that launched it. The step is also timed as the training loop runs it, command buffers on, in a
  process of its own (``compare.throughput.step_timing``): the difference is what the profile's separate launches
  cost. A
  kernel's pass is backward when its launching instruction's op scope is under JAX's ``transpose(...)`` (or a
  Pallas kernel is named ``*_bwd*``), optimizer under the train step's ``optimizer`` scope, else forward.
- PyTorch: ``torch_reference.step_profile`` in its own process (``train_bench``'s runner at the reference's best
  settings, timed, then under ``torch.profiler``); a kernel's pass is the ``pass:`` range it ran in on the GPU.
  ``--torch-modes`` profiles each execution mode as a side of its own (eager, one CUDA graph, torch.compile with or
  without CUDA graphs: ``torch_reference.step_modes``), so the breakdown can be read at the reference's best.

Every kernel is classified by the one table of ``compare.characterize.kernel_classes`` (GEMM, SSM, attention,
convolution, normalization, elementwise/fusion, reduction, optimizer, copy/other); the unclassified share is reported,
never hidden. ``--ncu`` adds Nsight Compute counters of each side's longest kernels in one warm step
(``compare.characterize.counters``) against copy and matmul ceilings measured in the same run. Writes
``characterization.json`` (every number) and ``report.md`` under ``reports/<config>/<device>-<date>/`` (or
``--out``), with the operator breakdown as stacked bars (``breakdown.png``) and, with counters, a roofline
(``roofline.png``) and a histogram of DRAM bandwidth utilization (``bandwidth.png``).

``--with-jax-impl mamba_ssm_triton`` adds a third side: the same JAX step with ``model.impl=mamba_ssm_triton``, whose
SSD runs mamba-ssm's own Triton kernels, forward and backward, launched from JAX (``torch_reference.ssd_jax_triton``):
beside the PyTorch side it holds the SSD kernels fixed and changes the framework around them."""

import argparse
import contextlib
import datetime
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import jax

from compare.characterize.counters import HEADLINE_FIGURES, headline, measure_ceilings, side_counters
from compare.characterize.kernel_classes import CATEGORIES, UNCLASSIFIED, classify
from compare.characterize.plots import bandwidth_histogram, breakdown_bars, roofline
from compare.characterize.step_profile import StepProfile, common_shape_batches, profile_steps
from compare.kernels.launches import environment_as_trained, name_every_launch
from compare.throughput.plain_step import plain_step_overrides
from compare.throughput.steps import json_line
from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from jax_mamba.train.step import init_training
from torch_reference.step_modes import MODES

PHASES = ("forward", "backward", "optimizer", "other")
# 2: PyTorch wall time outside the profiler and passes by GPU time; JAX kernels by launching instruction (command
# buffers off); headline figures and counters. Reports without it (schema 1) timed PyTorch under the profiler.
SCHEMA = 2
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
    the unclassified share, the ``top`` rows, and every kernel's total us and category (``kernel_totals``)."""
    rows = sorted(rows, key=lambda row: -row[1])
    by_category = dict.fromkeys((*CATEGORIES, UNCLASSIFIED), 0.0)
    by_phase = {phase: dict.fromkeys((*CATEGORIES, UNCLASSIFIED), 0.0) for phase in PHASES}
    kernels: dict[tuple[str, str, str], dict] = {}
    totals: dict[str, dict] = {}
    for kernel, us, phase, scope in rows:
        category = classify(kernel, scope)
        by_category[category] += us / 1e3
        by_phase[phase][category] += us / 1e3
        row = kernels.setdefault((kernel, category, phase), {"kernel": kernel, "us": 0.0, "category": category,
                                                             "phase": phase, "scope": scope})  # fmt: skip
        row["us"] += us  # one row per kernel, class and pass (a kernel launched by every layer is one row)
        total = totals.setdefault(kernel, {"us": 0.0, "category": category})
        total["us"] += us  # a kernel's category: that of its first (largest) row
    total = sum(by_category.values())
    return {
        "device_ms": total,
        "categories_ms": by_category,
        "phases_ms": by_phase,
        "unclassified_share": by_category[UNCLASSIFIED] / total if total else 0.0,
        "kernels": sorted(kernels.values(), key=lambda k: -k["us"])[:top],
        "kernel_totals": totals,
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


@contextlib.contextmanager
def jax_training(config: str, overrides: list[str], steps: int) -> Iterator[tuple]:
    """(the loop's training setup, up to ``steps`` device batches of one shape) for ``config``: the batches the
    trace and the counter profiler both measure."""
    cfg = load_config(config, plain_step_overrides(config, overrides))  # the step the PyTorch side runs
    task = task_for(cfg)
    dataset = task.make_dataset()
    try:
        candidates = [dataset.train_batch(s, cfg.train.grad_accum_steps) for s in range(4 * steps)]
        yield init_training(cfg, task), common_shape_batches(candidates, steps)
    finally:
        if hasattr(dataset, "close"):
            dataset.close()


def characterize_jax(
    config: str, overrides: list[str], steps: int, keep_trace: Path | None = None, impl: str | None = None
) -> dict:
    """The JAX side; with ``impl``, the step under ``model.impl=impl``, named ``jax:<impl>`` (not timed as trained:
    the timing process would not have that impl registered)."""
    if impl is not None:
        import torch_reference.ssd_jax_triton  # noqa: F401  (registers impl="mamba_ssm_triton")

        overrides = [*overrides, f"--model.impl={impl}"]
    with jax_training(config, overrides, steps) as (setup, batches):
        profile = profile_steps(setup, batches, keep_trace)
    device = jax.devices()[0]
    return {
        "framework": "jax" if impl is None else f"jax:{impl}",
        "version": f"jax {jax.__version__}",
        "device": getattr(device, "device_kind", str(device)),
        "steps_profiled": profile.steps,
        "step_wall_ms": profile.step_wall_ms,
        "step_wall_ms_as_trained": wall_ms_as_trained(config, overrides, steps) if impl is None else None,
        "launches": profile.launches,
        **summarize(jax_rows(profile)),
    }


def wall_ms_as_trained(config: str, overrides: list[str], steps: int) -> float | None:
    """Wall time per step of the same step, dispatched back to back with XLA's command buffers on (as the training
    loop runs it), in its own process; None (with the reason printed) where that process fails."""
    command = [sys.executable, "-m", "compare.throughput.step_timing", "--config", config, f"--steps={max(steps, 2)}"]
    result = json_line([*command, *overrides], env=environment_as_trained())
    if result["returncode"] != 0:
        print(f"the as-trained timing failed: {result['cause']}", flush=True)
        return None
    return result["step_ms"]


def characterize_torch(
    config: str, overrides: list[str], steps: int, keep_trace: Path | None = None, mode: str = "eager"
) -> dict:
    """The PyTorch reference in execution ``mode``, in its own process (so the two frameworks never share the GPU's
    memory); a side named "torch", or "torch MODE" for a mode other than eager."""
    command = [sys.executable, "-m", "torch_reference.step_profile", "--config", config, f"--steps={steps}"]
    command.append(f"--mode={mode}")
    if keep_trace is not None:
        command.append(f"--trace={keep_trace}")
    result = json_line([*command, *overrides])
    if result["returncode"] != 0:
        raise SystemExit(f"the PyTorch side failed ({' '.join(command[1:])}):\n{result['error']}")
    return {
        "framework": "torch" if mode == "eager" else f"torch {mode}",
        "mode": mode,
        "version": f"torch {result['torch']}; {result['reference']}; {result['settings']}",
        "device": result["device"],
        "steps_profiled": result["steps_profiled"],
        "step_wall_ms": result["step_wall_ms"],
        "launches": result["launches"],
        **summarize(torch_rows(result["passes_us"])),
    }


def _fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def counters_table(counters: dict) -> list[str]:
    """One row per profiled kernel: what ncu measured, against the ceilings."""
    lines = [
        "| kernel | category | us/step | launches | us/launch | DRAM GB/s | % copy | % peak | FLOP/byte | TFLOP/s "
        "| L2 hit % | occupancy % | grid | waves | block life us | tensor % | FMA % | ALU % | XU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k in counters["kernels"]:
        tensor = max(k.get("tensor_pipe_pct") or 0.0, k.get("hmma_pipe_pct") or 0.0)
        cells = [
            f"`{k['kernel'][:60]}`", k["category"], _fmt(k["us"]), str(k["launches"]), _fmt(k["us_per_launch"]),
            _fmt(k["dram_gbs"], ".0f"), _fmt(k.get("dram_pct_of_copy")), _fmt(k.get("dram_peak_pct")),
            _fmt(k["arithmetic_intensity"], ".2f"), _fmt(k["tflops"], ".2f"), _fmt(k.get("l2_hit_pct")),
            _fmt(k.get("occupancy_pct")), _fmt(k.get("grid_size"), ".0f"), _fmt(k.get("waves"), ".2f"),
            _fmt(k.get("block_lifetime_us"), ".2f"), _fmt(tensor), _fmt(k.get("fma_pipe_pct")),
            _fmt(k.get("alu_pipe_pct")), _fmt(k.get("xu_pipe_pct")),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    if counters["unmatched"]:
        lines += ["", "Chosen but not reported by ncu: " + ", ".join(f"`{n[:80]}`" for n in counters["unmatched"])]
    return lines


def _launch_note(side: dict) -> str:
    """JAX's wall time is taken with XLA's command buffers off (as profiled): every kernel launched on its own, so a
    step of many small kernels is slower than in training, where they run as CUDA graphs; the step's wall time as
    trained follows where it was measured."""
    if not side["framework"].startswith("jax") or not side.get("launches"):
        return ""
    note = f" (XLA command buffers off: {sum(side['launches'].values()):,.0f} kernel launches a step"
    trained = side.get("step_wall_ms_as_trained")
    if trained:
        note += f"; {trained:.2f} ms as trained, command buffers on"
    return note + ")"


def markdown(config: str, sides: list[dict], command: str, ceilings: dict | None = None) -> str:
    """The report: command and versions, headline figures, categories side by side (ms per step, share), then each
    side's passes, top kernels and counters."""
    lines = [f"# Training-step characterization: {config}", "", f"Command: `{command}`", ""]
    for side in sides:
        lines.append(
            f"- {side['framework']}: {side['device']}, {side['version']}; {side['steps_profiled']} profiled steps "
            f"after warm-up, wall {side['step_wall_ms']:.2f} ms per step{_launch_note(side)}, kernels "
            f"{side['device_ms']:.2f} ms, unclassified {100 * side['unclassified_share']:.1f}%"
        )
    if ceilings:
        lines.append(
            f"- ceilings measured in this run: copy {ceilings['copy_gbs']:.0f} GB/s (read+write), bf16 matmul "
            f"{ceilings['matmul_tflops']:.0f} TFLOP/s; FP32 vector peak {_fmt(ceilings['vector_tflops'])} TFLOP/s "
            "(arithmetic)"
        )
    lines += ["", "| headline | " + " | ".join(s["framework"] for s in sides) + " |", "|---|" + "---|" * len(sides)]
    for figure in HEADLINE_FIGURES:
        lines.append(f"| {figure.label} | " + " | ".join(figure.cell(s["headline"]) for s in sides) + " |")
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
        counters = side.get("counters")
        if counters:
            lines += ["", f"### {side['framework']}: Nsight Compute counters (one step)", ""]
            if counters.get("error"):
                lines += ["ncu gave no counters:", "", "```", counters["error"][-1500:], "```"]
            else:
                lines += [f"`{counters['command']}`", ""]
                if counters.get("target_overrides"):
                    lines += [f"Counted step's config overrides: `{' '.join(counters['target_overrides'])}`", ""]
                lines += counters_table(counters)
    return "\n".join(lines) + "\n"


def report_dir(root: Path, config: str, device: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    return root / Path(config).stem / f"{slug}-{datetime.date.today().isoformat()}"


def write_report(
    config: str, sides: list[dict], out: Path, command: str, overrides: list[str], ceilings: dict | None = None
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for side in sides:
        side["headline"] = headline(side)
    record = {
        "schema": SCHEMA,
        "date": datetime.date.today().isoformat(),
        "config": config,
        "overrides": overrides,
        "command": command,
        "ceilings": ceilings,
        "sides": sides,
    }
    (out / "characterization.json").write_text(json.dumps(record, indent=2))
    (out / "report.md").write_text(markdown(config, sides, command, ceilings))
    breakdown_bars(sides, out / "breakdown.png", f"{config}: where a training step's GPU time goes")
    if ceilings and any((side.get("counters") or {}).get("kernels") for side in sides):
        roofline(sides, ceilings, out / "roofline.png", f"{config}: kernels of one training step")
        bandwidth_histogram(sides, out / "bandwidth.png", f"{config}: DRAM bandwidth of one training step's kernels")


def main(argv: list[str] | None = None) -> int:
    # the PyTorch side runs in a second process on the same GPU: JAX takes memory as it needs it, not 75% up front
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    parser = argparse.ArgumentParser(prog="python -m compare.characterize", description=__doc__)
    parser.add_argument("--config", required=True, help="bundled config name or YAML path")
    parser.add_argument("--framework", default="both", choices=FRAMEWORKS)
    parser.add_argument("--steps", type=int, default=8, help="profiled training steps (after a warm-up pass)")
    parser.add_argument("--out", type=Path, help="report folder (default reports/<config>/<device>-<date>/)")
    parser.add_argument(
        "--ncu", nargs="?", const="both", choices=FRAMEWORKS, help="Nsight Compute counters of the longest kernels"
    )
    parser.add_argument("--ncu-kernels", type=int, default=16, help="at most this many kernel names per framework")
    parser.add_argument("--ncu-launches", type=int, default=200, help="at most this many launches per framework")
    parser.add_argument("--ncu-timeout", type=float, default=300, help="seconds per framework's ncu run")
    parser.add_argument(
        "--ncu-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for the counted step only, e.g. n_layer=2: a layer's kernels are the same at any depth, "
        "and ncu replays every launch (repeatable)",
    )
    parser.add_argument("--keep-traces", action="store_true", help="keep each profiler's trace in the report folder")
    parser.add_argument(
        "--torch-modes",
        nargs="+",
        choices=list(MODES),
        default=["eager"],
        help="the PyTorch side's execution modes, a side each (torch_reference.step_modes); counters: eager's",
    )
    parser.add_argument(
        "--with-jax-impl",
        choices=["mamba_ssm_triton"],
        help="a third side: the JAX step with model.impl=IMPL (mamba_ssm_triton: mamba-ssm's own SSD kernels from JAX)",
    )
    args, overrides = parse_args_with_overrides(parser, argv)
    for name in ("steps", "ncu_kernels", "ncu_launches"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')}: expected a positive integer, got {getattr(args, name)}")
    for item in args.ncu_override:
        if "=" not in item or item.startswith(("-", "=")):
            raise SystemExit(f"--ncu-override: expected KEY=VALUE (e.g. n_layer=2), got {item!r}")
    name_every_launch()
    if jax.default_backend() != "gpu":
        raise SystemExit("compare.characterize profiles GPU kernels: JAX sees no GPU")
    device = jax.devices()[0].device_kind
    out = args.out or report_dir(Path("reports"), args.config, device)
    out.mkdir(parents=True, exist_ok=True)
    ceilings = measure_ceilings() if args.ncu else None
    sides = []
    if args.framework in ("jax", "both"):
        print("profiling jax ...", flush=True)
        trace = out / "trace-jax.xplane.pb"
        sides.append(characterize_jax(args.config, overrides, args.steps, trace if args.keep_traces else None))
        print(f"jax: {sides[-1]['step_wall_ms']:.2f} ms per step", flush=True)
    for mode in args.torch_modes if args.framework in ("torch", "both") else []:
        print(f"profiling torch ({mode}) ...", flush=True)
        trace = out / f"trace-torch{'' if mode == 'eager' else '-' + mode}.json"
        sides.append(characterize_torch(args.config, overrides, args.steps, trace if args.keep_traces else None, mode))
        print(f"{sides[-1]['framework']}: {sides[-1]['step_wall_ms']:.2f} ms per step", flush=True)
    if args.with_jax_impl:
        print(f"profiling jax with model.impl={args.with_jax_impl} ...", flush=True)
        sides.append(characterize_jax(args.config, overrides, args.steps, impl=args.with_jax_impl))
        print(f"{sides[-1]['framework']}: {sides[-1]['step_wall_ms']:.2f} ms per step", flush=True)
    command = "python -m compare.characterize " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report(args.config, sides, out, command, overrides, ceilings)  # kept if a counter run is cut short
    ncu_overrides = [*overrides, *(f"--{item}" for item in args.ncu_override)]
    for side in sides:
        if side["framework"] in ("jax", "torch") and args.ncu in (side["framework"], "both"):
            print(f"ncu on {side['framework']}'s longest kernels ...", flush=True)
            side["counters"] = side_counters(
                side, args.config, ncu_overrides, out, ceilings, args.ncu_kernels, args.ncu_launches, args.ncu_timeout
            )
            write_report(args.config, sides, out, command, overrides, ceilings)
    print(markdown(args.config, sides, command, ceilings).split("\n## ")[0])
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
