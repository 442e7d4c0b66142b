"""The summary page across families: ``python -m compare.characterize.summary [REPORT_DIR ...] [--out FILE]``.

Reads every ``characterization.json`` under the given report folders (default: all of ``reports/``) and writes one
page (default ``reports/SUMMARY.md``):
- a table that sets each report's headline figures (``compare.characterize.counters.headline``: GEMM and SSM shares,
  DRAM bandwidth utilization, SSM arithmetic intensity, block lifetime, vector-boundness of tensor-core SSM kernels)
  beside the seed paper's; figures a report lacks (no counters were taken) are shown as "-", and the paper's figures
  are quoted from its text, with the section they come from;
- the spread of repeated runs (same config, overrides, framework, device and report schema);
- the paper's open questions: the SSM kernels' pipe utilizations from the counters (question 2), and every
  ``ssd-forward-variants.json`` under ``ROOT/questions`` (questions 1 and 3, ``compare.kernels.ssd_forward_variants``);
- ``ROOT/analysis.md`` as it is, if present: the written reading of these tables (where ours agree with the paper
  or differ, and why), which quotes no number the tables do not show."""

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

from compare.characterize.counters import HEADLINE_FIGURES, headline
from compare.kernels.ssd_forward_variants import totals_cells

# The seed paper (Characterizing Mamba training on H100 GPUs): its headline figures, quoted.
PAPER = {
    "gemm_share": ("up to 60%", "abstract, Fig. 1"),
    "ssm_share": ("up to 20%", "abstract, Fig. 1"),
    "dram_pct_of_peak": ("57.5% on average (of 3350 GB/s)", "V-C"),
    "ssm_arithmetic_intensity": ("low (memory-bound side of the roofline)", "Fig. 2"),
    "ssm_block_lifetime_us": ("very short", "V-C"),
    "ssm_tensor_kernels_vector_bound_share": ("89-92% of runtime", "V-D"),
}


def report_rows(paths: list[Path]) -> list[dict]:
    """One row per report side: {"report": folder, "config", "framework", "device", "headline"}."""
    rows = []
    for path in sorted(paths):
        record = json.loads(path.read_text())
        for side in record["sides"]:
            figures = dict(side.get("headline") or headline(side))
            counted = (side.get("counters") or {}).get("kernels", [])
            if record.get("schema", 1) < 2 and side["framework"] == "torch":
                # timed under the profiler then: not a step time
                figures["step_wall_ms"] = figures["step_wall_ms_as_trained"] = None
            rows.append(
                {
                    "report": path.parent,
                    "config": record["config"],
                    "framework": side["framework"],
                    "device": side["device"],
                    "headline": figures,
                    "repeat_key": repeat_key(record, side),
                    "ssm_kernels": [k for k in counted if k.get("category") == "SSM"],
                }
            )
    return rows


def repeat_key(record: dict, side: dict) -> tuple:
    """Reports with equal keys ran the same command: config, overrides, framework, device and report schema."""
    overrides = tuple(record.get("overrides") or ())
    return record["config"], overrides, side["framework"], side["device"], record.get("schema", 1)


SPREAD_FIGURES = ("step_wall_ms", "device_ms", "gemm_share", "ssm_share")


def spread_lines(rows: list[dict]) -> list[str]:
    """Repeated runs: each figure's range and (max - min) / mean over the runs."""
    groups = collections.defaultdict(list)
    for row in rows:
        groups[row["repeat_key"]].append(row)
    figures = [f for f in HEADLINE_FIGURES if f.key in SPREAD_FIGURES]
    lines = [
        "## Repeated runs",
        "",
        "Reports of the same command (config, overrides, framework, device, report schema): each figure's range over "
        "the runs and its spread, (max - min) / mean.",
        "",
        "| config | framework | runs | " + " | ".join(f.short for f in figures) + " |",
        "|---|---|---|" + "---|" * len(figures),
    ]
    repeated = [group for group in groups.values() if len(group) > 1]
    for group in repeated:
        cells = []
        for figure in figures:
            values = [r["headline"][figure.key] for r in group if r["headline"].get(figure.key) is not None]
            if len(values) < 2:
                cells.append("-")
                continue
            low, high = figure.cell({figure.key: min(values)}), figure.cell({figure.key: max(values)})
            cells.append(f"{low} - {high} ({(max(values) - min(values)) / statistics.mean(values):.1%})")
        lines.append(f"| {group[0]['config']} | {group[0]['framework']} | {len(group)} | " + " | ".join(cells) + " |")
    if not repeated:
        lines.append("| (no repeated runs) | | | " + " | ".join("-" for _ in figures) + " |")
    return lines


def pipe_lines(rows: list[dict], root: Path) -> list[str]:
    """Open question 2: each counted SSM kernel's pipe utilizations (% of peak issue) and vector-boundness."""
    lines = [
        "## Open question 2: tensor and vector pipes of the SSM kernels",
        "",
        "From each report's Nsight Compute counters: the share of peak issue rate of the tensor (HMMA/wgmma), FMA, "
        "ALU and XU (exp, transcendental) pipes while each SSM kernel ran; 'vector-bound' marks a tensor-core kernel "
        "whose busiest vector pipe (FMA, ALU or XU) is busier than its tensor pipe ('-': no tensor-core work).",
        "",
        "| report | framework | kernel | us/step | tensor % | FMA % | ALU % | XU % | vector-bound |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cell = lambda value: "-" if value is None else f"{value:.1f}"  # noqa: E731
    for row in rows:
        link = f"[{row['config']}]({row['report'].relative_to(root).as_posix()}/report.md)"
        for k in sorted(row["ssm_kernels"], key=lambda k: -k["us"]):
            pipes = " | ".join(cell(k.get(f"{pipe}_pipe_pct")) for pipe in ("tensor", "fma", "alu", "xu"))
            bound = {True: "yes", False: "no"}.get(k.get("vector_bound"), "-")
            lines.append(
                f"| {link} ({row['report'].name}) | {row['framework']} | `{k['kernel'][:48]}` | {k['us']:.0f} | "
                f"{pipes} | {bound} |"
            )
    return lines


def question_lines(root: Path) -> list[str]:
    """Open questions 1 and 3: every ``compare.kernels.ssd_forward_variants`` run under ``root/questions``."""
    runs = sorted((root / "questions").rglob("ssd-forward-variants.json"))
    lines = [
        "## Open questions 1 (persistent blocks) and 3 (fused vs split SSD forward)",
        "",
        "Each run of `compare.kernels.ssd_forward_variants` (its own page has every kernel's counters): the chunked "
        "SSD forward at one shape as our fused kernel, our split kernels, the split kernels with a persistent output "
        "kernel, mamba-ssm's five Triton kernels from PyTorch, and the same five launched from JAX (jax-triton). "
        "Wall time is the median per call outside any profiler; the rest is Nsight Compute's, summed over the "
        "call's kernels.",
        "",
        "| run | variant | wall ms | kernel us | launches | DRAM MB | L2 MB | DRAM GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    records = {path: json.loads(path.read_text()) for path in runs}
    for path, record in records.items():
        name = f"[{path.parent.relative_to(root).as_posix()}]({path.with_suffix('.md').relative_to(root).as_posix()})"
        run = f"{name} ({record['date']}, {record['device']})"
        lines += [f"| {run} | {v['variant']} | {totals_cells(v)} |" for v in record["variants"]]
    commands = sorted({record["command"] for record in records.values()})
    lines += ["", *(f"Command: `{c}`" for c in commands)] if runs else ["| (no runs) | | | | | | | |"]
    return lines


def markdown(rows: list[dict], root: Path) -> str:
    lines = [
        "# Characterization summary: our measurements beside the seed paper's",
        "",
        "Written by `python -m compare.characterize.summary` from each report's `characterization.json`; "
        "'counted %' is the share of kernel time that Nsight Compute measured (the bandwidth, intensity and "
        "lifetime columns cover those kernels only; '-' where a report has no counters). Reports written before "
        "the report schema 2 timed the PyTorch step under its profiler: that wall time is left out.",
        "",
        "| report | framework | " + " | ".join(figure.short for figure in HEADLINE_FIGURES) + " |",
        "|---|---|" + "---|" * len(HEADLINE_FIGURES),
    ]
    for row in rows:
        link = f"[{row['config']}]({row['report'].relative_to(root).as_posix()}/report.md)"
        cells = [figure.cell(row["headline"]) for figure in HEADLINE_FIGURES]
        lines.append(f"| {link} ({row['report'].name}) | {row['framework']} | " + " | ".join(cells) + " |")
    paper = [PAPER.get(figure.key, ("-", ""))[0] for figure in HEADLINE_FIGURES]
    lines.append("| seed paper (PyTorch, one H100) | | " + " | ".join(paper) + " |")
    lines += ["", "Where the paper's figures come from:", ""]
    lines += [f"- {key}: {text} ({where})" for key, (text, where) in PAPER.items()]
    lines += ["", *spread_lines(rows), "", *pipe_lines(rows, root), "", *question_lines(root)]
    analysis = root / "analysis.md"
    if analysis.exists():
        lines += ["", analysis.read_text().rstrip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.characterize.summary", description=__doc__)
    parser.add_argument("reports", nargs="*", type=Path, help="report folders (default: every one under reports/)")
    parser.add_argument("--root", type=Path, default=Path("reports"))
    parser.add_argument("--out", type=Path, help="default: ROOT/SUMMARY.md")
    args = parser.parse_args(argv)
    folders = args.reports or [p.parent for p in args.root.rglob("characterization.json")]
    paths = [folder / "characterization.json" for folder in folders]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"reports: no characterization.json in {', '.join(missing)}")
    out = args.out or args.root / "SUMMARY.md"
    out.write_text(markdown(report_rows(paths), out.parent))
    print(f"wrote {out} ({len(paths)} reports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
