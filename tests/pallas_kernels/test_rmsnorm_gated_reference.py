"""Gated RMSNorm reference against the float64 NumPy version: forward and every gradient (the gradients against
central differences of the NumPy version), both gate orders, groups, and argument checks."""

import re

import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import rmsnorm_fn
from tests.pallas_kernels import naive
from tests.pallas_kernels.one_program import forward_and_backward

CASES = [  # shape, dtype, group_size, norm_before_gate, gated, bias
    ((3, 16), jnp.float32, None, True, True, True),
    ((2, 5, 16), jnp.float32, 4, False, True, False),
    ((1, 1, 12), jnp.float32, 6, True, False, True),
    ((2, 7, 32), jnp.bfloat16, 8, False, True, False),
    ((4, 24), jnp.float16, None, False, True, True),
]


def norm_inputs(rng, shape, dtype, gated: bool, has_bias: bool) -> tuple[dict, list[str]]:
    """Random x (and z) in ``dtype``, weight around 1 and bias in float32; the names of those present."""
    dim = shape[-1]
    arrays = {
        "x": jnp.asarray(rng.normal(size=shape), dtype),
        "weight": jnp.asarray(rng.normal(1.0, 0.2, dim), jnp.float32),
        "bias": jnp.asarray(rng.normal(size=dim), jnp.float32) if has_bias else None,
        "z": jnp.asarray(rng.normal(size=shape), dtype) if gated else None,
    }
    return arrays, [k for k, v in arrays.items() if v is not None]


@pytest.mark.parametrize("shape,dtype,group_size,norm_before_gate,gated,has_bias", CASES)
def test_forward_and_gradients_match_oracle(rng, shape, dtype, group_size, norm_before_gate, gated, has_bias):
    arrays, names = norm_inputs(rng, shape, dtype, gated, has_bias)
    exact = {k: np.asarray(arrays[k].astype(jnp.float32), np.float64) for k in names}

    def run(*xs):
        return rmsnorm_fn(
            **dict(zip(names, xs, strict=True)), eps=1e-5, group_size=group_size, norm_before_gate=norm_before_gate
        )

    dout = jnp.asarray(rng.normal(size=shape), dtype)
    out, grads = forward_and_backward(run, [arrays[k] for k in names], dout)
    grads = dict(zip(names, grads, strict=True))
    dout64 = np.asarray(dout.astype(jnp.float32), np.float64)

    def numpy_norm(**override):
        kw = {**{k: exact.get(k) for k in ("x", "weight", "bias", "z")}, **override}
        return naive.rmsnorm_forward(**kw, eps=1e-5, group_size=group_size, norm_before_gate=norm_before_gate)

    assert out.dtype == dtype
    assert_close("out", out, numpy_norm(), dtype)
    for name in names:
        value = exact[name].copy()
        want = naive.numeric_grad(lambda v, name=name: numpy_norm(**{name: v}), value, dout64)
        assert_close(f"d{name}", grads[name], want, arrays[name].dtype)


BAD = [
    ({"weight": jnp.ones(7)}, "weight must have shape (dim,)"),
    ({"bias": jnp.ones(3)}, "bias must have shape (dim,)"),
    ({"z": jnp.ones((2, 4))}, "z must have shape like x"),
    ({"group_size": 3}, "group_size=3 must be positive and divide dim=8"),
    ({"eps": 0.0}, "eps must be > 0"),
]


@pytest.mark.parametrize("override,message", BAD)
def test_bad_arguments_name_the_argument(override, message):
    good = {"x": jnp.ones((2, 8)), "weight": jnp.ones(8)}
    with pytest.raises(ValueError, match=re.escape(message)):
        rmsnorm_fn(**{**good, **override})
