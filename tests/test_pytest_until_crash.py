"""``tools/pytest_until_crash.py`` names a test that kills the pytest process, deselects it and runs the rest."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "pytest_until_crash.py"

TESTS = """
import os


def test_before():
    pass


def test_kills_the_process():
    os._exit(7)  # as a CUDA error that aborts the process does: no report, no summary


def test_after():
    pass
"""


def test_a_test_that_kills_pytest_is_named_and_the_rest_still_run(tmp_path):
    (tmp_path / "test_victims.py").write_text(TESTS)
    ran = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "log"), "test_victims.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("round 0: exit 7; no summary"), ran.stdout
    assert any(line.startswith("crashed in test_victims.py::test_kills_the_process") for line in lines), ran.stdout
    assert any(line.startswith("round 1: exit 0;") and "2 passed" in line for line in lines), ran.stdout
    assert lines[-1] == "crashed tests: ['test_victims.py::test_kills_the_process']"
    second = (tmp_path / "log.1.txt").read_text()
    assert "test_victims.py::test_after PASSED" in second and "test_kills_the_process" not in second
