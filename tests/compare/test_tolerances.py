"""The tolerance a comparison with a reference gets from the reference's own error (``reference_noise_scale``)."""

import numpy as np
import pytest

from compare.tolerances import REFERENCE_FACTOR, reference_noise_scale, tolerance


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
