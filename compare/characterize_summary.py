"""The summary page across families: ``python -m compare.characterize_summary [REPORT_DIR ...] [--out FILE]``.

Reads every ``characterization.json`` under the given report folders (default: all of ``reports/``) and writes one
markdown table (default ``reports/SUMMARY.md``) that sets each report's headline figures (``compare.
characterize_counters.headline``: GEMM and SSM shares, DRAM bandwidth utilization, SSM arithmetic intensity, block
lifetime, vector-boundness of tensor-core SSM kernels) beside the seed paper's. Figures a report lacks (no counters
were taken) are shown as "-". The paper's figures are quoted from its text, with the section they come from."""

import argparse
import json
import sys
from pathlib import Path

from compare.characterize_counters import HEADLINE_FIGURES, headline

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
            if record.get("schema", 1) < 2 and side["framework"] == "torch":
                figures["step_wall_ms"] = None  # timed under the profiler then: not a step time
            rows.append(
                {
                    "report": path.parent,
                    "config": record["config"],
                    "framework": side["framework"],
                    "device": side["device"],
                    "headline": figures,
                }
            )
    return rows


def markdown(rows: list[dict], root: Path) -> str:
    lines = [
        "# Characterization summary: our measurements beside the seed paper's",
        "",
        "Written by `python -m compare.characterize_summary` from each report's `characterization.json`; "
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
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.characterize_summary", description=__doc__)
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
