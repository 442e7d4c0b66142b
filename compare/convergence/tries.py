"""Runs of one seed tried several times: do they differ, and how far? ``python -m compare.convergence.tries``.

Reads what ``tools/gpu-convergence.sh``'s ``tries``, ``det-tries`` and ``torch-tries`` stages leave in a folder: JAX
run folders ``jax-<group>-try<N>/metrics.jsonl`` and the reference's ``torch-try<N>.json`` (the output of
``torch_reference.train_curve``), every try from the same seed's weights and batches. ``--recorded FILE:NAME`` adds a
curve of a stored ``compare.convergence`` result (e.g. a break-away to place among the tries). Writes ``<out>.json``
(the curves), ``<out>.md`` (per group: each try's loss at step 1, its largest loss after the first 10 steps and where,
its mean over steps 21-50 and its last-``window`` mean; whether the tries are bitwise the same) and ``<out>.png``.
"""

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from compare.convergence.verdict import smooth
from compare.outputs import output_path
from jax_mamba.train.metrics import training_losses

EARLY_STEPS = 10  # the steepest fall of the loss, left out when looking for a spike
PLATEAU = slice(20, 50)  # steps 21-50: where a spike after warmup leaves a plateau


def read_tries(folder: Path) -> dict[str, dict[str, list[float]]]:
    """{group: {try name: per-step losses}}: "JAX <group>" for run folders, "mamba-ssm" for the reference's."""
    groups: dict[str, dict[str, list[float]]] = {}
    for run in sorted(folder.glob("jax-*-try*/metrics.jsonl")):
        group, number = re.fullmatch(r"jax-(.+)-try(\d+)", run.parent.name).groups()
        by_step = training_losses(run.parent)
        groups.setdefault(f"JAX {group}", {})[f"try {number}"] = [by_step[k] for k in sorted(by_step)]
    for run in sorted(folder.glob("torch-try*.json")):
        number = re.fullmatch(r"torch-try(\d+)\.json", run.name)[1]
        groups.setdefault("mamba-ssm", {})[f"try {number}"] = json.loads(run.read_text())["losses"]
    if not groups:
        raise SystemExit(f"{folder}: no jax-*-try*/metrics.jsonl or torch-try*.json")
    return groups


def try_row(name: str, losses: list[float], window: int) -> str:
    c = np.asarray(losses, np.float64)
    peak = EARLY_STEPS + int(np.argmax(c[EARLY_STEPS:]))
    return f"| {name} | {c[0]:.5f} | {c[peak]:.2f} at {peak + 1} | {c[PLATEAU].mean():.3f} | {c[-window:].mean():.3f} |"


def group_lines(group: str, tries: dict[str, list[float]], window: int) -> list[str]:
    curves = list(tries.values())
    same = all(np.array_equal(curves[0], c) for c in curves[1:])
    finals = [float(np.mean(c[-window:])) for c in curves]
    return [
        f"### {group}: "
        + (
            "one run"
            if len(curves) == 1
            else f"{len(curves)} tries, "
            + ("bitwise the same" if same else f"last-{window} means {min(finals):.3f} to {max(finals):.3f}")
        ),
        "",
        f"| try | loss at step 1 | largest loss after step {EARLY_STEPS} | mean of steps 21-50 | last {window} |",
        "|---|---|---|---|---|",
        *(try_row(name, losses, window) for name, losses in tries.items()),
        "",
    ]


def plot(path: Path, groups: dict[str, dict[str, list[float]]], window: int, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for i, (group, tries) in enumerate(groups.items()):
        for j, losses in enumerate(tries.values()):
            ax.plot(np.arange(1, len(losses) + 1), smooth(losses, window), color=f"C{i}", linewidth=1,
                    label=group if j == 0 else None)  # fmt: skip
    ax.set_ylim(top=6)
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss ({window}-step mean)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.convergence.tries", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", required=True, help="the folder the tries stages wrote")
    parser.add_argument("--recorded", action="append", default=[], help="FILE:NAME, a stored curve to add")
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--title", default="tries of one seed")
    parser.add_argument("--command", default="", help="the command that made the tries, for the report")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    groups = read_tries(Path(args.runs))
    for item in args.recorded:
        path, _, name = item.rpartition(":")
        stored = json.loads(Path(path).read_text())
        groups[f"recorded: {name} ({stored['device']}, {stored['date']})"] = {"the run": stored["curves"][name]}
    lengths = {len(c) for tries in groups.values() for c in tries.values()}
    if len(lengths) != 1:
        raise SystemExit(f"the curves have different lengths {sorted(lengths)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_path(out, ".json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "groups": groups}))
    plot(output_path(out, ".png"), groups, args.window, args.title)
    lines = [f"# {args.title}", "", *([f"Command: `{args.command}`", ""] if args.command else [])]
    for group, tries in groups.items():
        lines += group_lines(group, tries, args.window)
    lines.append(f"![tries]({output_path(out, '.png').name})")
    output_path(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
