"""Tolerances, in one place: relative L2 error ||actual - expected|| / ||expected|| allowed per dtype.

float32 arithmetic against a float64 oracle lands far under 1e-4; bf16/fp16 inputs and outputs carry their own
rounding (unit roundoff 2^-8 and 2^-11), so their bounds are set by that rounding, not by the algorithm.
"""

import jax.numpy as jnp
import numpy as np

REL_L2 = {
    "float64": 1e-10,
    "float32": 1e-4,
    "float16": 5e-3,
    "bfloat16": 2e-2,
}


def rel_l2(actual, expected) -> float:
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


def assert_close(name: str, actual, expected, dtype, scale: float = 1.0) -> None:
    """Fail on any NaN/Inf in ``actual``, a shape mismatch, or relative L2 error over the dtype's tolerance."""
    actual = np.asarray(actual).astype(np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != expected {expected.shape}"
    assert np.all(np.isfinite(actual)), f"{name}: non-finite values in the result"
    assert np.all(np.isfinite(expected)), f"{name}: non-finite values in the expected result (bad test input)"
    tol = REL_L2[jnp.dtype(dtype).name] * scale
    err = rel_l2(actual, expected)
    assert err <= tol, f"{name}: relative L2 error {err:.3e} > {tol:.1e} ({jnp.dtype(dtype).name})"
