"""compare.characterize.decode_profile's arithmetic on a hand-made trace: busy time is the union of kernel intervals."""

import pytest

from compare.characterize.decode_profile import summarize
from compare.kernels.launches import busy_ns


def test_busy_time_is_the_union_of_overlapping_and_disjoint_intervals():
    assert busy_ns([]) == 0
    assert busy_ns([(0, 10)]) == 10
    assert busy_ns([(5, 8), (0, 10), (20, 25)]) == 15  # one inside another, then a gap
    assert busy_ns([(0, 10), (10, 12), (11, 30)]) == 30  # touching and overlapping


def test_summary_is_per_step_and_counts_idle_time():
    launches = [("gemv", "dot.1", 0, 4000), ("loop_fusion", "f.1", 3000, 2000), ("gemv", "dot.2", 10000, 4000)]
    result = summarize(launches, steps=2, wall_s=20e-6)
    assert result["step_wall_us"] == pytest.approx(10.0)
    assert result["kernels_us"] == pytest.approx(5.0)  # (4 + 2 + 4) us over 2 steps
    assert result["busy_us"] == pytest.approx(4.5)  # [0, 5) and [10, 14) us
    assert result["launches"] == pytest.approx(1.5)
    assert result["kernels"]["gemv"] == {"us": pytest.approx(4.0), "launches": pytest.approx(1.0)}
    assert list(result["kernels"]) == ["gemv", "loop_fusion"]
    assert sum(c["us"] for c in result["classes"].values()) == pytest.approx(5.0)
