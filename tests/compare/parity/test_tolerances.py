"""The tolerance a comparison with a reference gets from the reference's own error (``reference_noise_scale``)."""

import numpy as np
import pytest

from compare.parity.tolerances import REFERENCE_FACTOR, compare_to_reference_noise, reference_noise_scale, tolerance


def test_a_reference_farther_from_the_truth_than_the_tolerance_raises_it(rng):
    exact = rng.normal(size=1000)
    off = exact + 5 * tolerance(np.float32) * np.linalg.norm(exact) * rng.normal(size=1000) / np.sqrt(1000)
    own = np.linalg.norm(off - exact) / np.linalg.norm(exact) / tolerance(np.float32)
    assert own > 1
    assert reference_noise_scale(off, exact, np.float32) == pytest.approx(REFERENCE_FACTOR * own)


def test_an_exact_enough_reference_keeps_the_scale_given(rng):
    exact = rng.normal(size=100)
    assert reference_noise_scale(exact.astype(np.float32), exact, np.float32) == 1.0
    assert reference_noise_scale(exact, exact, np.float32, scale=3.0) == 3.0


def test_a_non_finite_reference_raises_nothing(rng):
    exact = rng.normal(size=10)
    broken = exact.copy()
    broken[3] = np.nan
    assert reference_noise_scale(broken, exact, np.float32, scale=2.0) == 2.0


def _off(rng, exact, size: float) -> np.ndarray:
    """exact plus noise of relative L2 size ``size``."""
    noise = rng.normal(size=exact.shape)
    return exact + size * np.linalg.norm(exact) * noise / np.linalg.norm(noise)


def test_against_reference_noise_passes_on_the_distance_to_the_reference_or_to_its_float32_result(rng):
    """Ours may differ from the bf16 reference by REFERENCE_FACTOR x its own error, or be that close to its float32
    result; farther from both, or not finite, fails."""
    exact = rng.normal(size=8)  # a few values (a per-head dA): two errors can point apart by chance
    theirs = _off(rng, exact, 0.05)
    own = np.linalg.norm(theirs - exact) / np.linalg.norm(exact)
    assert compare_to_reference_noise("near theirs", _off(rng, theirs, 1.5 * own), theirs, exact, np.float32).passed
    apart = exact - 1.1 * (theirs - exact)  # near the truth as theirs, the other way: 2.1 x own from theirs
    row = compare_to_reference_noise("apart", apart, theirs, exact, np.float32)
    assert row.rel_l2_err > REFERENCE_FACTOR * own and row.passed and "passes" in row.note
    far = _off(rng, exact, 3 * own)
    assert not compare_to_reference_noise("far", far, theirs, exact, np.float32).passed
    broken = apart.copy()
    broken[2] = np.nan
    assert not compare_to_reference_noise("nan", broken, theirs, exact, np.float32).passed


def test_a_larger_factor_widens_the_bound_by_that_factor(rng):
    """``factor`` replaces REFERENCE_FACTOR: 2.5x the reference's error from its float32 result (3.5x from the
    reference itself) fails at the default and passes at 3."""
    exact = rng.normal(size=24)
    theirs = _off(rng, exact, 0.05)
    ours = exact - 2.5 * (theirs - exact)
    assert not compare_to_reference_noise("default", ours, theirs, exact, np.float32).passed
    row = compare_to_reference_noise("wider", ours, theirs, exact, np.float32, factor=3.0)
    assert row.passed and row.note.startswith("tolerance 3 x")
