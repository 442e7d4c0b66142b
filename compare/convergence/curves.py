"""Training-curve parity with mamba-ssm: ``python -m compare.convergence --config NAME --steps N``.

For each of ``--seeds`` seeds (s, s + 1, ...; at least 3), JAX trains the config (``python -m jax_mamba.train``,
``train.seed`` = that seed) and the reference trains from the very weights our loop initializes with that seed
(``torch_reference.train_curve``: mamba-ssm's ``MambaLMHeadModel`` or NVlabs' ``MambaVision``), on the same
batches, with the same learning-rate schedule, clipping and AdamW settings (fused AdamW and mamba-ssm's fused kernels
on a GPU; no torch.compile). Every run is its own process, ``--jobs`` of them at once (they share the GPU; JAX then
allocates as it goes instead of taking most of the memory up front). Writes ``<out>.json`` (every step's loss and the
verdict), ``<out>.md`` and ``<out>.png``.

The verdict (``compare.convergence.verdict``) compares each JAX seed with the reference run from the same start, step
by step, against the spread of mamba-ssm's own seeds and of our other seeds; it flags spikes one side has and the
other does not, and says "disagree" when a seed breaks away. ``--judge FILE`` judges the curves of a stored
``<out>.json`` again (also the two-JAX-seeds files this driver wrote before) and writes the report and plot anew.
Other ``--key=value`` arguments override the config on both sides (e.g. ``--warmup_steps=100``).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from compare.convergence.plot import plot
from compare.convergence.verdict import FRAMEWORK_NAMES, MIN_SEEDS, SPIKE_RATIO, curve_name, parse_curve_name, verdict
from compare.outputs import output_path
from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.train.metrics import training_losses
from torch_reference.curve_config import check_curve_config


def _run(command: list[str], what: str, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")
    return proc


def jax_curve(config: str, steps: int, seed: int, extra: list[str], workdir: Path, shared_gpu: bool) -> list[float]:
    """Every step's training loss of ``python -m jax_mamba.train`` (logging each step)."""
    run_dir = workdir / f"jax-seed{seed}"
    command = [
        sys.executable, "-m", "jax_mamba.train", "--config", config, f"--run_dir={run_dir}", f"--max_steps={steps}",
        f"--seed={seed}", "--log_every=1", f"--eval_every={steps}", f"--save_every={steps}", "--eval_batches=1",
        "--progress=false", "--sample_tokens=0", *extra,
    ]  # fmt: skip
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"} if shared_gpu else None
    _run(command, f"JAX run (seed {seed})", env)
    by_step = training_losses(run_dir)
    return [by_step.get(k, float("nan")) for k in range(1, steps + 1)]


def torch_curve(config: str, steps: int, seed: int, extra: list[str], device: str) -> dict:
    command = [
        sys.executable, "-m", "torch_reference.train_curve", "--config", config, f"--steps={steps}",
        f"--device={device}", f"--seed={seed}", *extra,
    ]  # fmt: skip
    return json.loads(_run(command, f"mamba-ssm run (seed {seed})").stdout.strip().splitlines()[-1])


def run_curves(args, extra: list[str]) -> tuple[dict[str, list[float]], dict]:
    """Both frameworks' curves for every seed, ``args.jobs`` processes at a time: ({name: losses}, the reference's
    description of its runs). Each finished run is also written to ``<out>.partial.json`` until all are done."""
    seeds = range(args.seed, args.seed + args.seeds)
    partial = output_path(args.out, ".partial.json")  # the runs done so far, in case the rest never finish
    record = {"config": args.config, "steps": args.steps, "overrides": extra, "curves": {}, "reference": None}
    saved = saved_runs(args.out) if args.resume else None
    if saved is not None:
        record = resumable(saved, record)
    done = record["curves"]
    todo = [(f, s) for f in FRAMEWORK_NAMES for s in seeds if curve_name(f, s) not in done]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        shared = args.jobs > 1
        runs = {
            pool.submit(jax_curve, args.config, args.steps, s, extra, Path(tmp), shared)
            if f == "jax"
            else pool.submit(torch_curve, args.config, args.steps, s, extra, args.device): (f, s)
            for f, s in todo
        }
        for run in as_completed(runs):
            framework, seed = runs[run]
            value = run.result()
            done[curve_name(framework, seed)] = value if framework == "jax" else value["losses"]
            if framework == "torch":
                record["reference"] = {k: v for k, v in value.items() if k not in ("losses", "seed")}
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(record))
    partial.unlink(missing_ok=True)
    return {curve_name(f, s): done[curve_name(f, s)] for f in FRAMEWORK_NAMES for s in seeds}, record["reference"] or {}


def saved_runs(out: str) -> dict | None:
    """The runs kept for ``--resume``: an interrupted run's ``<out>.partial.json``, else a finished ``<out>.json`` (to
    add seeds to it), in the partial file's form; None if there is neither."""
    partial, finished = output_path(out, ".partial.json"), output_path(out, ".json")
    if partial.is_file():
        return json.loads(partial.read_text())
    if not finished.is_file():
        return None
    result = json.loads(finished.read_text())
    reference = {**result["torch"], "device": result["device"]} if result.get("torch") else None
    return {**{k: result[k] for k in ("config", "steps", "overrides", "curves")}, "reference": reference}


def resumable(saved: dict, record: dict) -> dict:
    """``saved`` (the runs ``saved_runs`` kept) as the record to go on from if they were runs of the same config,
    steps and overrides, else a one-line refusal."""
    for key in ("config", "steps", "overrides"):
        if key in saved and saved[key] != record[key]:
            raise SystemExit(f"--resume: the kept run had {key} {saved[key]!r}, this one {record[key]!r}")
    lengths = {len(c) for c in saved["curves"].values()}
    if lengths - {record["steps"]}:
        raise SystemExit(f"--resume: the kept run's curves have {sorted(lengths)} steps, expected {record['steps']}")
    return {**record, "curves": dict(saved["curves"]), "reference": saved.get("reference")}


def judge(curves: dict[str, list[float]], window: int) -> dict:
    return verdict({parse_curve_name(name): losses for name, losses in curves.items()}, window)


SPIKES_LISTED = 4  # spikes a report names per side and seed (a run that broke away spikes at every other step)


def _spike_list(events: list[dict]) -> str:
    """'28-29 (13.26 vs 2.83), 45 (3.23 vs 2.13) and 5 more': steps, the spiking side's loss and the other's."""
    if not events:
        return "none"
    steps = lambda e: f"{e['first']}" + (f"-{e['last']}" if e["last"] > e["first"] else "")  # noqa: E731
    listed = ", ".join(f"{steps(e)} ({e['loss']:.2f} vs {e['other_loss']:.2f})" for e in events[:SPIKES_LISTED])
    return listed + (f" and {len(events) - SPIKES_LISTED} more" if len(events) > SPIKES_LISTED else "")


def _seed_row(s: dict) -> str:
    by_side = {side: [e for e in s["spikes"] if e["side"] == side] for side in FRAMEWORK_NAMES}
    band = f"{s['band_late']:.4f}" if s["judged"] else "-"
    return (
        f"| {s['seed']} | {s['first_step_difference']:.1e} | {s['final_jax']:.4f} / {s['final_torch']:.4f} | "
        f"{s['late_gap']:.4f} | {band} | {_spike_list(by_side['jax'])} | {_spike_list(by_side['torch'])} | "
        f"{'agree' if s['agree'] else '**breaks away**: ' + s['reason']} |"
    )


def report_lines(result: dict, png_name: str) -> list[str]:
    v, w = result["verdict"], result["window"]
    spread = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
    lines = [
        f"# Training-curve parity: {result['config']} ({result['device']}, {result['date']})",
        "",
        f"Command: `{result['command']}`",
        *([f"Judged again: `{result['judged_by']}`"] if "judged_by" in result else []),
        "",
        f"{result['steps']} steps. Each JAX seed and the mamba-ssm run beside it start from the same initial weights "
        f"(those our loop initializes with that seed) and see the same batches, schedule, clipping and AdamW "
        f"settings. mamba-ssm: {result['torch'].get('reference', '?')}; settings: "
        f"{result['torch'].get('settings', '?')}. JAX: jax {result['jax']}.",
        "",
        f"**Verdict: {'the curves agree' if v['agree'] else 'the curves disagree'}** ({v['reason']}).",
        "",
        f"Per JAX seed, against the mamba-ssm run from its start ({w}-step means; gaps are the mean |difference| over "
        f"the second half; the band is the largest such gap between two seeds of one framework, this seed left out; a "
        f"spike is a step whose loss is at least {SPIKE_RATIO}x the other side's on the same batch):",
        "",
        "| seed | step 1 abs diff | final loss JAX / mamba-ssm | gap | band | JAX-only spikes | mamba-ssm-only spikes "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|",
        *(_seed_row(s) for s in v["seeds"]),
        "",
        f"Spread between seeds over the second half (largest pair): mamba-ssm {spread(v['spread'].get('torch'))}, "
        f"JAX {spread(v['spread'].get('jax'))}. Bands drawn from "
        + "; ".join(sorted({s["band_source"] for s in v["seeds"] if s["judged"]}) or ["nothing"])
        + ".",
        "",
        f"![curves]({png_name})",
    ]
    return lines


def write_outputs(out: Path, result: dict) -> list[str]:
    out.parent.mkdir(parents=True, exist_ok=True)
    output_path(out, ".json").write_text(json.dumps(result, indent=1))
    plot(output_path(out, ".png"), result, f"{result['config']}: JAX and mamba-ssm from the same starts")
    lines = report_lines(result, output_path(out, ".png").name)
    output_path(out, ".md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.convergence", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--config", help="config name or YAML path (not with --judge)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--seeds", type=int, default=MIN_SEEDS, help=f"seeds per framework (at least {MIN_SEEDS})")
    parser.add_argument("--window", type=int, default=20, help="steps in the moving average")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each its own process)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="the PyTorch side's device")
    parser.add_argument("--judge", help="a stored <out>.json whose curves to judge again instead of training")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs already done: an interrupted run's (<out>.partial.json), else a finished one's\n"
        "(<out>.json; with more --seeds, to add seeds to it)",
    )
    parser.add_argument("--out", required=True, help="output path without suffix (.json, .md, .png)")
    args, extra = parse_args_with_overrides(parser, argv)
    if args.window < 1:
        raise SystemExit(f"--window must be >= 1, got {args.window}")
    command = " ".join(["python -m compare.convergence", *(argv if argv is not None else sys.argv[1:])])
    if args.judge:
        result = json.loads(Path(args.judge).read_text())
        result |= {"window": args.window, "verdict": judge(result["curves"], args.window), "judged_by": command}
        result.setdefault("jax", "?")
    else:
        if not args.config:
            raise SystemExit("--config is required (or --judge FILE)")
        if args.steps < 2 * args.window or args.seeds < MIN_SEEDS or args.jobs < 1:
            raise SystemExit(
                f"--steps must be >= 2 x --window ({2 * args.window}), --seeds >= {MIN_SEEDS} and --jobs >= 1; "
                f"got {args.steps}, {args.seeds}, {args.jobs}"
            )
        check_curve_config(load_config(args.config, [f"--max_steps={args.steps}", *extra]))  # before any run starts
        import jax  # for its version only: the runs are other processes, and this one leaves the GPU to them

        curves, reference = run_curves(args, extra)
        result = {
            "config": args.config,
            "device": reference.pop("device", "not recorded"),
            "date": time.strftime("%Y-%m-%d"),
            "jax": jax.__version__,
            "command": command,
            "steps": args.steps,
            "seeds": list(range(args.seed, args.seed + args.seeds)),
            "window": args.window,
            "overrides": extra,
            "torch": reference,
            "verdict": judge(curves, args.window),
            "curves": curves,
        }
    print("\n".join(write_outputs(Path(args.out), result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
