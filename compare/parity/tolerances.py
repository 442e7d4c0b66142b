"""Tolerances, in one place: relative L2 error ||actual - expected|| / ||expected|| allowed per dtype, used by the
kernel tests (against float64 oracles) and by the JAX-vs-PyTorch parity checks.

float32 arithmetic lands far under 1e-4; bf16/fp16 inputs and outputs carry their own rounding (unit roundoff 2^-8
and 2^-11), so their bounds are set by that rounding, not by the algorithm.
"""

from dataclasses import asdict, dataclass

import numpy as np

REL_L2 = {
    "float64": 1e-10,
    "float32": 1e-4,
    "float16": 2e-3,
    "bfloat16": 1e-2,
}

# Whole models in bf16 (autocast): rounding compounds over layers, and the two frameworks round in different places,
# so a fixed bound says little. There the bound is relative to mamba-ssm's own bf16 error: our bf16 result may differ
# from mamba-ssm's bf16 result by at most REFERENCE_FACTOR times mamba-ssm's bf16 distance from its float32 result
# (two independent errors of equal size differ by about sqrt(2) times either), and never less than REL_L2; or,
# failing that, ours may be at most that far from mamba-ssm's float32 result. Over a few values (a per-head dA)
# two errors of equal size can point apart by chance and differ by twice either: then ours is as exact as theirs,
# which is what the bound is for (compare_to_reference_noise).
REFERENCE_FACTOR = 2.0

# A parameter whose gradient is zero in exact arithmetic (a bias right before a batch norm in training, the last
# block's output bias before it) gets rounding noise from both frameworks, uncorrelated: relative to itself that
# noise differs by 100%. Gradient rows are therefore relative to max(own norm, GRAD_FLOOR x the whole gradient's
# norm); a gradient of ordinary size is compared relative to itself as before. Where the reference can tell, the
# floor of a bias gradient is also the spread of the terms it sums (its layer's output gradient, every row: the
# scale its rounding adds up to, however far they cancel; compare.parity.check): a float32 bias before a batch norm
# in graph-mamba-tiny has a spread about 100x GRAD_FLOOR x the whole gradient's norm.
GRAD_FLOOR = 1e-3


def gradient_floor(grads: dict) -> float:
    """GRAD_FLOOR x the L2 norm of the whole gradient ({parameter name: array}, summed in float64)."""
    return GRAD_FLOOR * float(np.sqrt(sum(np.sum(np.square(np.asarray(g, np.float64))) for g in grads.values())))


def tolerance(dtype) -> float:
    return REL_L2[np.dtype(dtype).name]


def rel_l2(actual, expected) -> float:
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


@dataclass
class Comparison:
    """One row of a parity table."""

    name: str
    max_abs_err: float
    rel_l2_err: float
    tolerance: float
    passed: bool
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def compare(name: str, actual, expected, dtype, scale: float = 1.0, floor: float = 0.0) -> Comparison:
    """Relative L2 error against the dtype's tolerance (times ``scale``); NaN/Inf or a shape mismatch fails. The
    error is relative to max(||expected||, ``floor``) (see GRAD_FLOOR)."""
    actual = np.asarray(actual).astype(np.float64)
    expected = np.asarray(expected).astype(np.float64)
    tol = tolerance(dtype) * scale
    if actual.shape != expected.shape:
        return Comparison(name, np.inf, np.inf, tol, False, f"shape {actual.shape} != {expected.shape}")
    if not np.all(np.isfinite(actual)):
        return Comparison(name, np.inf, np.inf, tol, False, "non-finite values in the result")
    if not np.all(np.isfinite(expected)):
        return Comparison(name, np.inf, np.inf, tol, False, "non-finite values in the expected result")
    max_abs = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    norm = float(np.linalg.norm(expected))
    if norm == 0 and floor == 0:  # nothing to be relative to: demand exact zeros, and say so
        return Comparison(name, max_abs, 0.0 if max_abs == 0 else np.inf, tol, max_abs == 0, "expected is all zeros")
    err = float(np.linalg.norm(actual - expected) / max(norm, floor))
    note = f"relative to the floor {floor:.1e}" if norm < floor else ""
    return Comparison(name, max_abs, err, tol, err <= tol, note)


def reference_noise_scale(reference, exact, dtype, scale: float = 1.0, floor: float = 0.0) -> float:
    """The tolerance scale for comparing a result with ``reference``: ``scale``, raised to REFERENCE_FACTOR x the
    reference's own error (``reference`` against ``exact``, a more exact computation of the same thing) where that
    is larger. A comparison with a reference cannot be held tighter than the reference's own distance from the truth."""
    return _noise_scale(compare("reference", reference, exact, dtype, scale, floor).rel_l2_err, dtype, scale)


def _noise_scale(noise: float, dtype, scale: float = 1.0, factor: float = REFERENCE_FACTOR) -> float:
    """``scale`` or ``factor`` x ``noise`` (a reference's relative error) in units of the dtype's tolerance."""
    return max(scale, factor * noise / tolerance(dtype)) if np.isfinite(noise) else scale


def compare_to_reference_noise(
    name: str, actual, expected, expected_fp32, dtype, floor: float = 0.0, factor: float = REFERENCE_FACTOR
) -> Comparison:
    """Like :func:`compare`, with the tolerance raised to ``factor`` x the reference's own rounding error
    (``expected`` against ``expected_fp32``, the reference computed in float32). A result farther than that from
    the reference still passes where it is within that tolerance of the float32 reference (as exact as the
    reference, up to the factor; the two errors pointed apart). The note gives our own distance from the float32
    reference: where it is below the reference's, ours is the more exact result."""
    noise = compare(name, expected, expected_fp32, dtype, floor=floor).rel_l2_err
    scale = _noise_scale(noise, dtype, factor=factor)
    row = compare(name, actual, expected, dtype, scale, floor)
    ours = compare(name, actual, expected_fp32, dtype, scale, floor)
    row.note = row.note or f"tolerance {factor:g} x mamba-ssm's bf16 error ({noise:.1e})"
    row.note += f"; ours from mamba-ssm's float32: {ours.rel_l2_err:.1e}"
    if not row.passed and ours.passed:
        row.passed = True
        row.note += " (within the tolerance: passes)"
    return row


def assert_close(name: str, actual, expected, dtype, scale: float = 1.0, floor: float = 0.0) -> None:
    """Fail on any NaN/Inf in ``actual``, a shape mismatch, or relative L2 error over the dtype's tolerance (relative
    to max(||expected||, ``floor``), see ``compare``)."""
    row = compare(name, actual, expected, dtype, scale, floor)
    detail = row.note or f"relative L2 error {row.rel_l2_err:.3e} > {row.tolerance:.1e} ({np.dtype(dtype).name})"
    assert row.passed, f"{name}: {detail}"
