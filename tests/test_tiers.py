"""The suite's tiers (tests/tiers.py): the quick tier's tests exist and cover every package, a listed test that
disappears stops the run, and the seed runner reads failures from pytest's report."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest, seeds, tiers

ROOT = Path(__file__).parents[1]


def test_listed_files_exist_and_the_quick_tier_touches_every_package():
    for nodeid in tiers.QUICK:
        assert (ROOT / nodeid.split("::")[0]).is_file(), nodeid
    for path in tiers.SEED_SENSITIVE:
        assert (ROOT / path).is_file(), path
    assert len(set(tiers.QUICK)) == len(tiers.QUICK)
    packages = {Path(nodeid.split("::")[0]).parts[1] for nodeid in tiers.QUICK}
    assert {"pallas_kernels", "jax_mamba", "torch_reference", "compare", "test_layering.py"} <= packages


class _Item:
    def __init__(self, nodeid):
        self.nodeid, self.markers = nodeid, []

    def add_marker(self, marker):
        self.markers.append(marker.name)


def test_a_listed_test_missing_from_a_collected_file_stops_the_run(monkeypatch):
    monkeypatch.setattr(tiers, "QUICK", ("tests/a.py::kept", "tests/a.py::renamed", "tests/b.py::other"))
    items = [_Item("tests/a.py::kept"), _Item("tests/a.py::new_name")]
    with pytest.raises(pytest.UsageError, match=r"tests/a\.py::renamed"):
        conftest._mark_quick_tier(SimpleNamespace(args=["tests"]), items)
    assert items[0].markers == ["quick"] and items[1].markers == []

    items = [_Item("tests/a.py::kept")]  # one test asked for: the rest of its file was not collected
    conftest._mark_quick_tier(SimpleNamespace(args=["tests/a.py::kept"]), items)
    assert items[0].markers == ["quick"]


def test_the_seed_runner_reads_failures_and_errors_from_the_junit_report(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.pallas_kernels.test_x" name="test_ok[1]" time="0.1"/>'
        '<testcase classname="tests.pallas_kernels.test_x" name="test_bad[2]" time="0.1"><failure message="x"/>'
        "</testcase>"
        '<testcase classname="tests.jax_mamba.test_y" name="test_setup" time="0.1"><error message="y"/></testcase>'
        '<testcase classname="tests.jax_mamba.test_y" name="test_skipped" time="0"><skipped/></testcase>'
        "</testsuite></testsuites>"
    )
    assert seeds.failures(report) == [
        "tests/pallas_kernels/test_x.py::test_bad[2]",
        "tests/jax_mamba/test_y.py::test_setup",
    ]
