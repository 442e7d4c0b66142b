"""Where a kernel's instructions and stall samples fall, from ncu's SASS page (``ncu -i REP --page source
--print-source sass --csv > FILE.csv``): totals by stall reason and by opcode, and the straight-line stretches between
groups of ``HGMMA`` (wgmma) instructions (HGMMAs fewer than ``GROUP_GAP`` instructions apart are one group), so that
a Mosaic GPU kernel's phases (the work before its first products, then each group of products and the work up to the
next) can be weighed against each other.

Usage: ``python tools/ncu_sass_phases.py FILE.csv [--warps N]``, e.g.

    python tools/ncu_sass_phases.py ssd_bwd_dx-h128.csv --warps 131072

``--warps``: the launch's warps (programs x warps a program), to give instructions per warp; without it, totals.
"""

import argparse
import collections
import csv
from pathlib import Path

GROUP_GAP = 32  # instructions in the code between two HGMMA of one group of products at most

STALLS = (
    "stall_selected",
    "stall_long_sb",
    "stall_barrier",
    "stall_no_inst",
    "stall_wait",
    "stall_short_sb",
    "stall_not_selected",
    "stall_dispatch",
    "stall_mio",
    "stall_math",
)


def opcode(source: str) -> str:
    """The opcode of one SASS line without its predicate and modifiers ("@!P1 BRA 0x..." -> "BRA")."""
    tokens = source.split()
    if tokens and tokens[0].startswith("@"):
        tokens = tokens[1:]
    return tokens[0].split(".")[0] if tokens else "?"


def read_rows(path: Path) -> list[dict[str, str]]:
    """The per-instruction rows of ncu's SASS csv (its first line names the kernel, the second the columns)."""
    lines = list(csv.reader(path.open()))
    header = lines[1]
    return [dict(zip(header, line, strict=True)) for line in lines[2:] if len(line) == len(header)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--warps", type=int, default=1, help="warps in the launch (instructions are divided by it)")
    args = parser.parse_args()
    rows = read_rows(args.csv)
    count = lambda row, key: int(row.get(key) or 0)  # noqa: E731
    samples = sum(count(r, "Warp Stall Sampling (All Samples)") for r in rows)
    executed = sum(count(r, "Instructions Executed") for r in rows) / args.warps
    print(f"{len(rows)} instructions in the code, {executed:.0f} executed a warp, {samples} stall samples")
    for stall in STALLS:
        by_op = collections.Counter()
        for r in rows:
            by_op[opcode(r["Source"])] += count(r, stall)
        total = sum(by_op.values())
        top = ", ".join(f"{op} {n}" for op, n in by_op.most_common(4))
        print(f"  {stall:19s} {total / max(samples, 1):6.1%}  ({top})")
    phases, phase, since_product = [], None, GROUP_GAP
    for r in rows:
        op = opcode(r["Source"])
        if phase is None or (op == "HGMMA" and since_product >= GROUP_GAP):
            phase = {"instructions": 0.0, "samples": 0, "ops": collections.Counter(), "products": 0}
            phases.append(phase)
        phase["instructions"] += count(r, "Instructions Executed") / args.warps
        phase["samples"] += count(r, "Warp Stall Sampling (All Samples)")
        phase["ops"][op] += count(r, "Instructions Executed") / args.warps
        phase["products"] += op == "HGMMA"
        since_product = 0 if op == "HGMMA" else since_product + 1
    print("phases (each starts at a group of HGMMA; the first at the kernel's start):")
    for i, p in enumerate(phases):
        top = ", ".join(f"{op} {n:.0f}" for op, n in p["ops"].most_common(5))
        share = p["samples"] / max(samples, 1)
        work = f"{p['products']:2d} HGMMA, {p['instructions']:6.0f} executed a warp"
        print(f"  {i:3d}: {work}, {share:6.1%} of samples ({top})")


if __name__ == "__main__":
    main()
