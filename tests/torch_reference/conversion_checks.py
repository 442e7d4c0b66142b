"""What every family's weight-conversion tests check the same way: random variables of a model's names and shapes,
and two variable dicts equal name for name, value for value and dtype for dtype."""

import numpy as np


def random_variables(expected: dict[str, tuple[int, ...]], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """float32 normal values for every name in ``expected`` (name -> shape); int32 counts for BatchNorm's
    ``num_batches_tracked``."""
    values = {}
    for name, shape in expected.items():
        if name.endswith("num_batches_tracked"):
            values[name] = rng.integers(0, 100, size=shape).astype(np.int32)
        else:
            values[name] = rng.normal(size=shape).astype(np.float32)
    return values


def assert_same_variables(actual: dict, expected: dict) -> None:
    """The same names, and under each an identical array of the same dtype."""
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
        assert actual[name].dtype == expected[name].dtype, name
