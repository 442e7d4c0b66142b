"""compare.characterize_summary: one row per report side from the saved JSON (headline figures recomputed for reports
that predate them, old PyTorch wall times left out), the paper's row, and the refusal of a folder with no report."""

import json

import pytest

from compare import characterize_summary
from tests.compare.test_characterize_counters import torch_like_side


def write(folder, sides, schema):
    folder.mkdir(parents=True)
    record = {"config": folder.parent.name, "sides": sides} | ({"schema": schema} if schema else {})
    (folder / "characterization.json").write_text(json.dumps(record))


def test_summary_rows_and_paper(tmp_path):
    new = torch_like_side()
    new["headline"] = {
        "step_wall_ms": 12.5, "device_ms": 11.0, "gemm_share": 0.25, "ssm_share": 0.5, "dram_pct_of_peak": 61.0
    }  # fmt: skip
    write(tmp_path / "mamba2-130m" / "h100-2026-11-24", [new, {**new, "framework": "jax"}], schema=2)
    write(tmp_path / "mamba1-130m" / "h100-2026-11-22", [torch_like_side()], schema=None)  # no headline, schema 1
    assert characterize_summary.main(["--root", str(tmp_path)]) == 0
    page = (tmp_path / "SUMMARY.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| [")]
    assert len(rows) == 3
    assert rows[0].startswith("| [mamba1-130m](mamba1-130m/h100-2026-11-22/report.md)")
    assert "| torch | - | 1.00 | 30.0 | 40.0 | - |" in rows[0]  # recomputed shares; its wall time left out
    assert "| torch | 12.50 | 11.00 | 25.0 | 50.0 | - | 61.0 |" in rows[1]
    assert "| seed paper (PyTorch, one H100) | | - | - | up to 60% | up to 20% |" in page
    assert "57.5% on average" in page


def test_summary_refuses_a_folder_without_a_report(tmp_path):
    with pytest.raises(SystemExit, match=r"no characterization\.json"):
        characterize_summary.main([str(tmp_path)])
