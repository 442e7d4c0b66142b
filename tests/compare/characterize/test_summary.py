"""compare.characterize.summary: one row per report side from the saved JSON (headline figures recomputed for reports
that predate them, old PyTorch wall times left out), the paper's row, and the refusal of a folder with no report."""

import json

import pytest

from compare.characterize import summary as characterize_summary
from tests.compare.characterize.test_counters import torch_like_side


def write(folder, sides, schema, overrides=()):
    folder.mkdir(parents=True)
    record = {"config": folder.parent.name, "sides": sides, "overrides": list(overrides)}
    record |= {"schema": schema} if schema else {}
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
    assert "| torch | - | - | 1.00 | 30.0 | 40.0 | - |" in rows[0]  # recomputed shares; its wall times left out
    assert "| torch | 12.50 | - | 11.00 | 25.0 | 50.0 | - | 61.0 |" in rows[1]
    assert "| seed paper (PyTorch, one H100) | | - | - | - | up to 60% | up to 20% |" in page
    assert "57.5% on average" in page


def test_summary_refuses_a_folder_without_a_report(tmp_path):
    with pytest.raises(SystemExit, match=r"no characterization\.json"):
        characterize_summary.main([str(tmp_path)])


def test_repeated_runs_spread_pipes_questions_and_analysis(tmp_path):
    def side(wall, framework="jax"):
        out = {**torch_like_side(), "framework": framework}
        out["headline"] = {"step_wall_ms": wall, "device_ms": 10.0, "gemm_share": 0.2, "ssm_share": 0.5}
        return out

    counted = side(99.0)
    counted["counters"] = {"kernels": [
        {"kernel": "ssd_fwd_fused", "category": "SSM", "us": 400.0, "tensor_pipe_pct": 14.0, "fma_pipe_pct": 8.8,
         "alu_pipe_pct": 14.7, "xu_pipe_pct": 10.6, "vector_bound": True},
        {"kernel": "nvjet_gemm", "category": "GEMM", "us": 900.0, "tensor_pipe_pct": 70.0},
    ]}  # fmt: skip
    write(tmp_path / "m2" / "h100-a", [side(100.0)], schema=2)
    write(tmp_path / "m2" / "h100-b", [side(110.0)], schema=2)
    write(tmp_path / "m2" / "h100-c", [counted], schema=2, overrides=["--n_layer=2"])  # another command
    variants = {"variant": "fused", "wall_ms": 0.19, "kernel_us": 200.0, "launches": 2, "dram_bytes": 1.6e8,
                "l2_bytes": 8e8, "kernels": {}}  # fmt: skip
    (tmp_path / "questions").mkdir()
    (tmp_path / "questions" / "ssd-forward-variants.json").write_text(json.dumps(
        {"command": "python -m compare.kernels.ssd_forward_variants --torch", "date": "2026-11-23", "device": "H100",
         "variants": [variants]}
    ))  # fmt: skip
    (tmp_path / "analysis.md").write_text("## Where ours agree\n\nThe written reading.\n")
    assert characterize_summary.main(["--root", str(tmp_path)]) == 0
    page = (tmp_path / "SUMMARY.md").read_text()
    spread = [line for line in page.splitlines() if line.startswith("| m2 | jax |")]
    assert spread == ["| m2 | jax | 2 | 100.00 - 110.00 (9.5%) | 10.00 - 10.00 (0.0%) | 20.0 - 20.0 (0.0%) | "
                      "50.0 - 50.0 (0.0%) |"]  # fmt: skip
    assert "| jax | `ssd_fwd_fused` | 400 | 14.0 | 8.8 | 14.7 | 10.6 | yes |" in page
    assert "nvjet_gemm" not in page.split("Open question 2")[1]  # SSM kernels only
    assert "| fused | 0.190 | 200.0 | 2 | 160.0 | 800.0 | 800 |" in page
    assert "Command: `python -m compare.kernels.ssd_forward_variants --torch`" in page
    assert page.rstrip().endswith("The written reading.")
