"""One scaling report from several ``compare.scaling`` runs of the same settings: ``python -m compare.scaling.join
A.json B.json ... --out PATH [--note TEXT]``.

A machine's device counts can be run as separate ``compare.scaling`` processes (one count each, or several configs
at once on disjoint GPUs through ``CUDA_VISIBLE_DEVICES``); efficiencies need every count of a config in one report.
The runs must agree on what a point means (device kind, mode, batch per device, sequence length, steps, NCCL and XLA
settings), and those that ran the reference on its parallelism (DDP or FSDP2); each (config, devices) point may come
from one run only. Writes ``<out>.json`` and ``<out>.md`` with the runs' commands and ``--note`` (how they were run,
e.g. which ones went at once)."""

import argparse
import json
import sys
from pathlib import Path

from compare.outputs import output_path
from compare.scaling.sweep import write_report

AGREE = ("device", "mode", "per_device_batch", "seq_len", "steps", "nccl", "xla")


def join(runs: list[dict], note: str | None = None) -> tuple[dict, list[dict]]:
    """The header and points of one report from ``runs`` (each a ``compare.scaling`` JSON), points by config and
    device count. ValueError where the runs disagree on a setting in ``AGREE`` or two hold the same point."""
    if not runs:
        raise ValueError("join needs at least one compare.scaling run")
    first = runs[0]
    for i, run in enumerate(runs[1:], 1):
        differ = [k for k in AGREE if run.get(k) != first.get(k)]
        if differ:
            raise ValueError(f"run {i} differs from run 0 in {differ}: " + ", ".join(
                f"{k} {first.get(k)!r} against {run.get(k)!r}" for k in differ))  # fmt: skip
    parallel = {r["torch_parallel"] for r in runs if r.get("torch_parallel")}
    if len(parallel) > 1:
        raise ValueError(f"the runs ran the reference with different parallelism: {sorted(parallel)}")
    points, seen = [], set()
    for run in runs:
        for p in run["points"]:
            key = (p["config"], p["devices"])
            if key in seen:
                raise ValueError(f"point {key[0]} at {key[1]} devices comes from more than one run")
            seen.add(key)
            points.append(p)
    points.sort(key=lambda p: (p["config"], p["devices"]))
    header = {k: first.get(k) for k in AGREE}
    header["torch_parallel"] = next(iter(parallel), None)
    header["devices"] = sorted({p["devices"] for p in points})
    header["date"] = first["date"] if all(r.get("date") == first.get("date") for r in runs) else "several dates"
    header["command"] = [c for r in runs for c in ([r["command"]] if isinstance(r["command"], str) else r["command"])]
    header["torch_settings"] = next((r["torch_settings"] for r in runs if r.get("torch_settings")), None)
    if note:
        header["note"] = note
    return header, points


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.scaling.join", description=__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="compare.scaling .json files")
    parser.add_argument("--out", required=True, help="output path without suffix (.json, .md)")
    parser.add_argument("--note", help="a line for the report: how the runs were made")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.runs if not p.is_file()]
    if missing:
        parser.error(f"runs: no such file {missing}")
    try:
        header, points = join([json.loads(p.read_text()) for p in args.runs], args.note)
    except ValueError as e:
        parser.error(str(e))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_path(out, ".json").write_text(json.dumps({**header, "points": points}, indent=2))
    print("\n".join(write_report(out, header, points)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
