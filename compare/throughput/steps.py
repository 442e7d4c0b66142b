"""Whole-training-step throughput, JAX beside the PyTorch reference: ``python -m compare.throughput``.

Any family's configs: each trains in a fresh process (``python -m jax_mamba.train``) for ``--steps`` steps; the
numbers are the loop's own: mean tokens/s or images/s over the steps after the first three (warm-up), less any step
that compiled a new batch shape (graph buckets), and the device's peak memory in use. ``--torch`` times the
reference on the same config and batches (``torch_reference.train_bench``: mamba-ssm, NVlabs' MambaVision or our
Graph-Mamba, at its best settings) in each execution mode of ``--torch_modes`` (eager, one CUDA graph,
torch.compile, torch.compile with CUDA graphs; each in its own process); ratios are against the fastest mode that
ran, the eager figure beside it, and a mode that fails is reported with its cause. ``--inference`` adds eval-mode
forward throughput on both sides (``compare.throughput.inference``; ``train_bench --inference``), ``--inference_only``
that alone. Other ``--key=value`` arguments are config overrides applied to every config and both sides. Writes
``<out>.json`` and ``<out>.md``."""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax

from compare.outputs import output_path
from compare.throughput.plain_step import plain_step_overrides
from jax_mamba.configs.loader import parse_args_with_overrides
from torch_reference.step_modes import MODES


def _names_an_error(line: str) -> bool:
    return "Error" in line or "Exception" in line or "error:" in line


def error_excerpt(stderr: str, tail_chars: int = 1500, max_lines: int = 20) -> str:
    """What a failed run's stderr says: its lines naming an error or exception (a launcher such as torchrun prints
    its own traceback last, after the worker's cause), then its last ``tail_chars`` characters."""
    named = [line for line in stderr.splitlines() if _names_an_error(line)]
    return "\n".join([*named[:max_lines], "...", stderr[-tail_chars:]]) if named else stderr[-tail_chars:]


def one_line_cause(stderr: str) -> str:
    """A failed run's cause in one line: the last line of its stderr naming an error or exception, else its last
    line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [line for line in lines if _names_an_error(line)]
    return (named or lines or ["no output"])[-1][:300]


def json_line(command: list[str], env: dict | None = None, timeout: float | None = None) -> dict:
    """Run a command that prints one JSON line last: that object (plus the command), or its exit code, stderr and
    cause in one line. ``env``: the command's whole environment (default: this process's); ``timeout``: seconds
    after which it is stopped and reported as failed (exit 124)."""
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as stopped:
        stderr = stopped.stderr.decode(errors="replace") if isinstance(stopped.stderr, bytes) else stopped.stderr or ""
        cause = f"did not finish within {timeout:g} s"
        return {
            "returncode": 124,
            "error": f"{cause}\n{stderr[-1500:]}",
            "cause": cause,
            "command": " ".join(command[1:]),
        }
    if proc.returncode != 0:
        return {
            "returncode": proc.returncode,
            "error": error_excerpt(proc.stderr),
            "cause": one_line_cause(proc.stderr),
            "command": " ".join(command[1:]),
        }
    return {"returncode": 0, **json.loads(proc.stdout.strip().splitlines()[-1]), "command": " ".join(command[1:])}


def run_one(
    config: str, steps: int, batch_size: int, seq_len: int, extra: list[str], workdir: Path, env: dict | None = None
) -> dict:
    """Train ``config`` in its own process (environment ``env``, default this one's); the loop's own figures, in the
    step the PyTorch side times (``plain_step``)."""
    run_dir = workdir / config
    extra = plain_step_overrides(config, extra)
    command = [
        sys.executable,
        "-m",
        "jax_mamba.train",
        "--config",
        config,
        f"--run_dir={run_dir}",
        f"--max_steps={steps}",
        f"--batch_size={batch_size}",
        f"--seq_len={seq_len}",
        "--eval_batches=1",
        f"--eval_every={steps}",
        f"--save_every={steps}",
        "--save_checkpoints=false",  # time the steps only: a 2.7b checkpoint with its AdamW state is 32 GB
        "--log_every=10",
        "--progress=false",
        "--sample_tokens=0",
        *extra,
    ]
    began = time.time()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    result = {
        "config": config,
        "command": " ".join(command[1:]),
        "returncode": proc.returncode,
        "wall_s": round(time.time() - began, 1),
    }
    if proc.returncode != 0:
        result["error"] = error_excerpt(proc.stderr)
        return result
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    end = next(r for r in reversed(records) if r.get("event") == "end")
    rate_key = next(k for k in end if k.endswith("_per_s_mean"))
    info = json.loads((run_dir / "run.json").read_text())
    result.update(
        unit=rate_key.removesuffix("_per_s_mean"),
        items_per_s=end[rate_key],
        data_wait_fraction=end.get("data_wait_fraction"),
        peak_memory_gib=(end["peak_memory_bytes"] or 0) / 2**30,
        traces=end["traces"],
        parameters=info["parameters"],
        compute_dtype=info["compute_dtype"],
        final_loss=next(r["loss"] for r in reversed(records) if "loss" in r and "event" not in r),
    )
    return result


def _bench_args(config: str, steps: int, batch_size: int, seq_len: int, extra: list[str]) -> list[str]:
    return ["--config", config, f"--steps={steps}", f"--batch_size={batch_size}", f"--seq_len={seq_len}", *extra]


def run_torch(
    config: str,
    steps: int,
    batch_size: int,
    seq_len: int,
    extra: list[str],
    inference=False,
    mode: str = "eager",
    timeout: float | None = None,
) -> dict:
    """The reference on the same config and batches in execution ``mode``, in its own process
    (torch_reference.train_bench), stopped after ``timeout`` seconds."""
    flags = ["--inference"] if inference else []
    args = _bench_args(config, steps, batch_size, seq_len, extra)
    command = [sys.executable, "-m", "torch_reference.train_bench", *args, *flags, f"--mode={mode}"]
    return json_line(command, timeout=timeout)


def best_mode(by_mode: dict[str, dict]) -> str | None:
    """The execution mode that ran fastest (items/s) among those that ran, or None if none did."""
    ran = {mode: r["items_per_s"] for mode, r in by_mode.items() if not r["returncode"]}
    return max(ran, key=ran.get) if ran else None


def run_torch_modes(
    config: str,
    sizes: tuple,
    modes: list[str],
    inference: bool = False,
    timeout: float | None = None,
    on_mode: Callable[[dict], None] | None = None,
) -> dict:
    """The reference in each execution mode (each its own process, at most ``timeout`` seconds): {"modes": {mode:
    result}, "best": the fastest mode that ran or None}; ``on_mode`` gets that dict as it stands after each mode."""
    by_mode = {}
    for mode in modes:
        by_mode[mode] = run_torch(config, *sizes, inference=inference, mode=mode, timeout=timeout)
        _progress(f"{config} PyTorch {mode}{' inference' if inference else ''}", by_mode[mode])
        if on_mode is not None:
            on_mode({"modes": dict(by_mode), "best": best_mode(by_mode)})
    return {"modes": by_mode, "best": best_mode(by_mode)}


def _progress(what: str, result: dict) -> None:
    """One line on stderr as each run ends, so that a run cut by a deadline shows what it had measured."""
    print(f"{what}: {_rate(result)} /s", file=sys.stderr, flush=True)


def run_jax_inference(config: str, steps: int, batch_size: int, seq_len: int, extra: list[str]) -> dict:
    args = _bench_args(config, steps, batch_size, seq_len, extra)
    return json_line([sys.executable, "-m", "compare.throughput.inference", *args])


def _rate(r: dict | None) -> str:
    if r is None:
        return "not run"
    return f"failed (exit {r['returncode']})" if r["returncode"] else f"{r['items_per_s']:,.0f}"


def _ratio(ours: dict, theirs: dict | None) -> str:
    if theirs is None or theirs["returncode"]:
        return ""
    return f"{ours['items_per_s'] / theirs['items_per_s']:.2f}x"


def _side_cells(ours: dict, reference: dict | None) -> list[str]:
    """[ours/s, peak, best reference/s (its mode), its peak, ours / best, reference eager/s, ours / eager], the
    reference given as ``run_torch_modes`` gives it; failures and absences said."""
    if ours["returncode"]:
        return [f"failed (exit {ours['returncode']})", *[""] * 6]
    cells = [f"{ours['items_per_s']:,.0f}", f"{ours['peak_memory_gib'] or 0:.1f}"]
    if reference is None:
        return [*cells, "not run", *[""] * 4]
    best = reference["modes"].get(reference["best"]) if reference["best"] else None
    eager = reference["modes"].get("eager")
    if best is None:
        return [*cells, "every mode failed", *[""] * 4]
    return [
        *cells,
        f"{best['items_per_s']:,.0f} ({reference['best']})",
        f"{best['peak_memory_gib'] or 0:.1f}",
        _ratio(ours, best),
        _rate(eager),
        _ratio(ours, eager),
    ]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


SIDE_HEADER = (
    "| JAX /s | JAX peak GiB | PyTorch best /s (mode) | its peak GiB | JAX / best | PyTorch eager /s | JAX / eager |"
)


def _mode_lines(rows: list[dict]) -> list[str]:
    """Every PyTorch execution mode tried: its rate and peak memory, or why it failed (one line)."""
    lines = []
    for r in rows:
        for part, key in (("training", "torch"), ("inference", "torch_inference")):
            for mode, m in r.get(key, {}).get("modes", {}).items():
                if m["returncode"]:
                    cells = [f"failed (exit {m['returncode']})", "", m.get("cause", "")]
                else:
                    cells = [f"{m['items_per_s']:,.0f}", f"{m['peak_memory_gib'] or 0:.1f}", m.get("settings", "")]
                lines.append(_row([r["config"], part, mode, *cells]))
    if not lines:
        return []
    header = ["", "Every PyTorch execution mode tried (``torch_reference.step_modes``):", ""]
    return [
        *header,
        "| config | pass | mode | /s | peak GiB | settings, or the cause of a failure |",
        "|---|---|---|---|---|---|",
        *lines,
    ]


def _unfinished_note(header: dict) -> list[str]:
    measuring = header.get("measuring")
    if measuring is None:
        return []
    return [
        "",
        f"**Unfinished**: written while {measuring} was being measured; the run stopped there, so its row holds only "
        "what was measured before (a PyTorch mode missing from the table below was not run).",
    ]


def write_report(out: Path, header: dict, rows: list[dict]) -> list[str]:
    """The markdown summary (training, then inference where measured, then every PyTorch mode) into ``<out>.md``;
    returns its lines. Ratios are against the fastest PyTorch mode that ran, the eager one beside it."""
    trained = [r for r in rows if not r.get("training_skipped")]
    lines = [
        f"# {'Training' if trained else 'Inference'} throughput ({header['device']}, {header['date']})",
        "",
        f"jax {header['jax']}, batch {header['batch_size']} (x length {header['seq_len']} for language models), "
        f"{header['steps']} steps (mean over steps 4..N, less any step that compiled a new batch shape), "
        f"overrides {header['overrides'] or 'none'}. JAX data wait: "
        "the share of the loop's time spent waiting for the next batch (0% when the host keeps ahead). "
        "PyTorch: each execution mode in its own process; the ratio is against the fastest that ran.",
        f"Command: `{header['command']}`",
        *_unfinished_note(header),
    ]
    if trained:
        lines += [
            "",
            "| config | params | compute | unit | JAX data wait | final loss " + SIDE_HEADER,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for r in trained:
        if r["returncode"]:
            lines.append(_row([r["config"], f"failed (exit {r['returncode']})", *[""] * 11]))
            continue
        info = [r["config"], f"{r['parameters'] / 1e6:.1f}M", r["compute_dtype"], r["unit"]]
        wait = r.get("data_wait_fraction")
        wait_cell = "" if wait is None else f"{100 * wait:.0f}%"
        lines.append(_row([*info, wait_cell, f"{r['final_loss']:.3f}", *_side_cells(r, r.get("torch"))]))
    inference = [r for r in rows if "inference" in r]
    if inference:
        lines += [
            "",
            "Inference (eval mode, forward only, same batch size):",
            "",
            "| config " + SIDE_HEADER,
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [_row([r["config"], *_side_cells(r["inference"], r.get("torch_inference"))]) for r in inference]
    lines += _mode_lines(rows)
    output_path(out, ".md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.throughput", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="+", default=["mamba1-130m", "mamba2-130m"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=2048, help="language models' sequence length")
    parser.add_argument("--out", required=True, help="output path without suffix (writes .json and .md)")
    parser.add_argument(
        "--torch",
        action="store_true",
        help="also time the PyTorch reference on the same configs (needs a GPU and python -m torch_reference.build)",
    )
    parser.add_argument("--inference", action="store_true", help="also time eval-mode forwards (both sides)")
    parser.add_argument(
        "--inference_only", action="store_true", help="time eval-mode forwards only (both sides), no training step"
    )
    parser.add_argument(
        "--torch_modes",
        nargs="+",
        choices=list(MODES),
        default=list(MODES),
        help="the reference's execution modes to time, each in its own process (ratios: against the fastest)",
    )
    parser.add_argument(
        "--torch_timeout",
        type=float,
        default=1200.0,
        help="seconds a PyTorch mode's process may take (torch.compile included) before it is reported as failed",
    )
    args, extra = parse_args_with_overrides(parser, argv)  # extra: overrides for every config
    args.inference = args.inference or args.inference_only
    device = jax.devices()[0]
    header = {
        "device": getattr(device, "device_kind", str(device)),
        "backend": jax.default_backend(),
        "jax": jax.__version__,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "date": time.strftime("%Y-%m-%d"),
        "overrides": extra,
        "command": " ".join(["python -m compare.throughput", *(argv if argv is not None else sys.argv[1:])]),
    }
    del device
    sizes = (args.steps, args.batch_size, args.seq_len, extra)
    rows = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(current: dict | None = None) -> list[str]:
        """Every result so far into ``<out>.json`` and ``.md``, after each measurement, so that a run stopped by a
        deadline keeps what it measured; ``current``: the unfinished row of the config being measured."""
        state = header if current is None else {**header, "measuring": current["config"]}
        runs = rows if current is None else [*rows, current]
        output_path(out, ".json").write_text(json.dumps({**state, "runs": runs}, indent=2))
        return write_report(out, state, runs)

    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            if args.inference_only:
                row = {"config": config, "returncode": 0, "training_skipped": True}
            else:
                row = run_one(config, *sizes, Path(tmp))
                _progress(f"{config} JAX", row)
                save(row)
            if args.torch and not args.inference_only:
                row["torch"] = run_torch_modes(
                    config, sizes, args.torch_modes, timeout=args.torch_timeout,
                    on_mode=lambda torch, row=row: save({**row, "torch": torch}),
                )  # fmt: skip
            if args.inference:
                row["inference"] = run_jax_inference(config, *sizes)
                _progress(f"{config} JAX inference", row["inference"])
                save(row)
                if args.torch:
                    row["torch_inference"] = run_torch_modes(
                        config, sizes, args.torch_modes, inference=True, timeout=args.torch_timeout,
                        on_mode=lambda torch, row=row: save({**row, "torch_inference": torch}),
                    )  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
            lines = save()
    print("\n".join(lines))
    failed = [
        r
        for r in rows
        if r["returncode"]
        or r.get("inference", {}).get("returncode")
        or any(k in r and r[k]["best"] is None for k in ("torch", "torch_inference"))
    ]
    return 1 if failed else 0  # a PyTorch mode may fail (said in the report) while another runs


if __name__ == "__main__":
    sys.exit(main())
