"""The machinery behind every family's weight conversion: a table of name suffixes and layout changes between our
flat variable dicts and torch state dicts, applied strictly (missing or unexpected keys and shape mismatches raise
``ConversionError`` listing them) and exactly (float32 values copied, integer counters kept integers).

Layout changes:
- ``none``: the same array.
- ``kernel``: a Linear's (in, out) <-> torch's (out, in); a Conv2d's (kh, kw, in, out) <-> torch's (out, in, kh, kw).
- ``conv1d``: a depthwise Conv1d's (channels, width) <-> torch's (channels, 1, width).
"""

from collections.abc import Mapping, Sequence

import numpy as np

Rule = tuple[str, str, str]  # (our name suffix, torch name suffix, layout change); the first match wins


class ConversionError(ValueError):
    """A state dict or config that does not fit the model; the message lists the offending keys."""


def rule_for(name: str, rules: Sequence[Rule]) -> tuple[str, str]:
    """(torch key, layout change) for our variable ``name``; names no rule matches keep their name."""
    for ours, theirs, change in rules:
        if name.endswith(ours):
            return name[: len(name) - len(ours)] + theirs, change
    return name, "none"


def _to_torch_layout(value: np.ndarray, change: str) -> np.ndarray:
    if change == "kernel":
        return value.T if value.ndim == 2 else value.transpose(3, 2, 0, 1)
    if change == "conv1d":
        return value[:, None, :]
    return value


def _to_our_layout(value: np.ndarray, change: str) -> np.ndarray:
    if change == "kernel":
        return value.T if value.ndim == 2 else value.transpose(2, 3, 1, 0)
    if change == "conv1d":
        return value[:, 0, :] if value.ndim == 3 else value
    return value


def _exact(value, integer_dtype) -> np.ndarray:
    """float32 for floating values, ``integer_dtype`` for counters (torch's num_batches_tracked)."""
    value = np.asarray(value)
    return value.astype(integer_dtype) if np.issubdtype(value.dtype, np.integer) else value.astype(np.float32)


def check_names(keys: set[str], expected: set[str], what: str) -> None:
    missing, unexpected = sorted(expected - keys), sorted(keys - expected)
    if missing or unexpected:
        raise ConversionError(f"{what} do not fit the config: missing {missing}, unexpected {unexpected}")


def to_torch(
    values: Mapping[str, np.ndarray], expected: Mapping[str, tuple[int, ...]], rules: Sequence[Rule], what: str
) -> dict[str, np.ndarray]:
    """Our variables (exactly the names and shapes of ``expected``) -> torch state dict (numpy, contiguous)."""
    check_names(set(values), set(expected), what)
    bad = [f"{k}: {np.shape(values[k])} != {expected[k]}" for k in sorted(values) if np.shape(values[k]) != expected[k]]
    if bad:
        raise ConversionError("shape mismatches: " + "; ".join(bad))
    state = {}
    for name, value in values.items():
        key, change = rule_for(name, rules)
        state[key] = np.array(_to_torch_layout(_exact(value, np.int64), change), order="C")
    return state


def from_torch(
    state: Mapping[str, np.ndarray], expected: Mapping[str, tuple[int, ...]], rules: Sequence[Rule]
) -> dict[str, np.ndarray]:
    """torch state dict (numpy arrays) -> our variables, strictly checked against ``expected`` names and shapes."""
    by_torch_key = {rule_for(name, rules)[0]: name for name in expected}
    check_names(set(state), set(by_torch_key), "state dict keys")
    values, mismatched = {}, []
    for key, name in by_torch_key.items():
        value = _to_our_layout(_exact(state[key], np.int32), rule_for(name, rules)[1])
        if value.shape != expected[name]:
            mismatched.append(f"{key}: {tuple(np.shape(state[key]))} does not fit {name} {expected[name]}")
        values[name] = value
    if mismatched:
        raise ConversionError("shape mismatches: " + "; ".join(mismatched))
    return values
