"""Condense Nsight Compute's ``--csv --page details`` output into a few lines per kernel: time, registers,
occupancy, issue rates, pipe use and the largest stall reasons (warp cycles stalled per issued instruction).

Usage: ``python tools/ncu_table.py NCU.csv ...`` (the CSVs ``tools/gpu-scan-probe.sh``'s ncu stage writes).
"""

import collections
import csv
import sys

METRICS = [
    "Duration",
    "Registers Per Thread",
    "Dynamic Shared Memory Per Block",
    "Theoretical Occupancy",
    "Achieved Occupancy",
    "Block Limit Registers",
    "Block Limit Shared Mem",
    "Waves Per SM",
    "Issue Slots Busy",
    "No Eligible",
    "Active Warps Per Scheduler",
    "Eligible Warps Per Scheduler",
    "Warp Cycles Per Issued Instruction",
    "Compute (SM) Throughput",
    "DRAM Throughput",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed.sum",
    "sm__sass_thread_inst_executed_op_mufu_pred_on.sum",
    "Grid Size",
    "Block Size",
]
SHORT = {
    "sm__inst_executed_pipe_xu": "xu%",
    "sm__pipe_fma_cycles_active": "fma%",
    "sm__pipe_alu_cycles_active": "alu%",
    "sm__inst_executed_pipe_lsu": "lsu%",
    "smsp__inst_executed.sum": "warp insts",
    "sm__sass_thread_inst_executed_op_mufu_pred_on.sum": "mufu thread insts",
}
TOP_STALLS = 7


def kernels(path: str) -> dict[tuple[str, str], dict[str, tuple[str, str]]]:
    """(ID, kernel name) -> metric name -> (value, unit), in the file's order."""
    lines = open(path).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    found: dict = collections.OrderedDict()
    for row in csv.DictReader(lines[start:]):
        found.setdefault((row["ID"], row["Kernel Name"][:70]), {})[row["Metric Name"]] = (
            row["Metric Value"],
            row["Metric Unit"],
        )
    return found


def label(metric: str) -> str:
    return next((short for key, short in SHORT.items() if metric.startswith(key)), metric)


def main(paths: list[str]) -> None:
    for path in paths:
        print("##", path)
        for (kid, name), metrics in kernels(path).items():
            print(f"- [{kid}] {name}")
            shown = (
                f"{label(k)}={metrics[k][0]}{' ' + metrics[k][1] if metrics[k][1] else ''}"
                for k in METRICS
                if k in metrics
            )
            print("   " + "; ".join(shown))
            stalls = {
                k.split("issue_stalled_")[1].split("_per_issue")[0]: float(v[0].replace(",", ""))
                for k, v in metrics.items()
                if "issue_stalled_" in k
            }
            top = sorted(stalls.items(), key=lambda kv: -kv[1])[:TOP_STALLS]
            print("   stalls per issue: " + ", ".join(f"{k} {v:.2f}" for k, v in top))


if __name__ == "__main__":
    main(sys.argv[1:])
