"""``tools/ncu_table.py`` condenses Nsight Compute's details CSV: one kernel's time, registers and largest stalls."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "ncu_table.py"
HEADER = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
HEADER += '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def row(kernel_id: int, name: str, metric: str, unit: str, value: str) -> str:
    fields = [str(kernel_id), "1", "python3", "host", name, "1", "7", "(128, 1, 1)", "(12, 8, 4)", "0", "9.0"]
    return ",".join(f'"{f}"' for f in [*fields, "Section", metric, unit, value])


def test_one_kernel_condensed(tmp_path):
    lines = ["==PROF== Connected to process 1", HEADER]
    lines += [row(0, "selective_scan_bwd", "Duration", "us", "2,808.20")]
    lines += [row(0, "selective_scan_bwd", "Registers Per Thread", "register/thread", "168")]
    for stall, value in (("barrier", "1.5"), ("long_scoreboard", "9.25"), ("wait", "0.75")):
        lines.append(row(0, "selective_scan_bwd", STALL.format(stall), "", value))
    csv_file = tmp_path / "ncu.csv"
    csv_file.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, str(SCRIPT), str(csv_file)], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[1] == "- [0] selective_scan_bwd"
    assert "Duration=2,808.20 us; Registers Per Thread=168 register/thread" in lines[2]
    assert lines[3] == "   stalls per issue: long_scoreboard 9.25, barrier 1.50, wait 0.75"
