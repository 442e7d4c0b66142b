"""Causal conv1d reference against the float64 NumPy loops (forward, final states, every gradient), packed
sequences against separate runs, the channels-first layout, and argument checks."""

import re

import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import causal_conv1d_fn
from tests.pallas_kernels import naive
from tests.pallas_kernels.one_program import forward_and_backward
from tests.pallas_kernels.test_ssd_reference import random_seq_idx

CASES = [  # batch, L, dim, width, dtype, bias, silu, initial_states, seq_idx
    (2, 1, 8, 4, jnp.float32, True, True, False, False),
    (1, 2, 3, 4, jnp.float32, False, False, True, False),
    (2, 37, 16, 4, jnp.float32, True, True, False, True),
    (3, 64, 5, 2, jnp.bfloat16, True, False, True, False),
    (1, 50, 8, 3, jnp.float16, True, True, False, True),
]


@pytest.mark.parametrize("batch,seqlen,dim,width,dtype,has_bias,silu,has_init,seq", CASES)
def test_forward_and_gradients_match_oracle(rng, batch, seqlen, dim, width, dtype, has_bias, silu, has_init, seq):
    arrays = {
        "x": jnp.asarray(rng.normal(size=(batch, seqlen, dim)), dtype),
        "weight": jnp.asarray(rng.normal(size=(dim, width)) / np.sqrt(width), dtype),
        "bias": jnp.asarray(rng.normal(size=dim), dtype) if has_bias else None,
        "initial_states": jnp.asarray(rng.normal(size=(batch, width - 1, dim)), dtype) if has_init else None,
    }
    seq_idx = random_seq_idx(rng, batch, seqlen) if seq and seqlen > 1 else None
    names = [k for k, v in arrays.items() if v is not None]
    exact = {k: None if v is None else np.asarray(v.astype(jnp.float32), np.float64) for k, v in arrays.items()}
    activation = "silu" if silu else None

    def run(*xs):
        kw = dict(zip(names, xs, strict=True))
        return causal_conv1d_fn(
            **kw,
            seq_idx=None if seq_idx is None else jnp.asarray(seq_idx),
            activation=activation,
            return_final_states=seq_idx is None,
        )

    dout = jnp.asarray(rng.normal(size=(batch, seqlen, dim)), dtype)
    no_final = jnp.zeros((batch, width - 1, dim), dtype)  # the final states' cotangent
    cotangent = (dout, no_final) if seq_idx is None else dout
    result, grads = forward_and_backward(run, [arrays[k] for k in names], cotangent)
    out = result[0] if seq_idx is None else result
    grads = dict(zip(names, grads, strict=True))

    args = (exact["x"], exact["weight"], exact["bias"], seq_idx, exact["initial_states"], silu)
    want, _ = naive.conv_forward(*args)
    dx, dw, db, dinit = naive.conv_backward(np.asarray(dout.astype(jnp.float32), np.float64), *args)
    want_grads = {"x": dx, "weight": dw, "bias": db, "initial_states": dinit}
    assert out.dtype == dtype
    assert_close("out", out, want, dtype)
    if seq_idx is None:
        history = np.concatenate(
            [np.zeros((batch, width - 1, dim)) if not has_init else exact["initial_states"], exact["x"]], axis=1
        )
        np.testing.assert_array_equal(np.asarray(result[1].astype(jnp.float32)), history[:, -(width - 1) :])
    for name in names:
        assert_close(f"d{name}", grads[name], want_grads[name], dtype)


def test_packed_sequences_equal_separate_runs(rng):
    lengths = [5, 1, 12, 3]
    x = jnp.asarray(rng.normal(size=(1, sum(lengths), 6)), jnp.float32)
    weight = jnp.asarray(rng.normal(size=(6, 4)), jnp.float32)
    bias = jnp.asarray(rng.normal(size=6), jnp.float32)
    seq_idx = jnp.asarray(np.repeat(np.arange(len(lengths)), lengths)[None].astype(np.int32))
    packed = causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, activation="silu")
    start = 0
    for length in lengths:
        alone = causal_conv1d_fn(x[:, start : start + length], weight, bias, activation="silu")
        assert_close("segment", packed[:, start : start + length], alone, jnp.float32)
        start += length


def test_channels_first_layout(rng):
    x = jnp.asarray(rng.normal(size=(2, 9, 4)), jnp.float32)
    weight = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
    init = jnp.asarray(rng.normal(size=(2, 2, 4)), jnp.float32)
    out, final = causal_conv1d_fn(x, weight, initial_states=init, return_final_states=True)
    out_cf, final_cf = causal_conv1d_fn(
        jnp.swapaxes(x, 1, 2),
        weight,
        initial_states=jnp.swapaxes(init, 1, 2),
        return_final_states=True,
        layout="channels_first",
    )
    np.testing.assert_allclose(np.asarray(jnp.swapaxes(out_cf, 1, 2)), np.asarray(out), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(jnp.swapaxes(final_cf, 1, 2)), np.asarray(final))


BAD = [
    ({"x": jnp.zeros((2, 5))}, "x must have rank 3"),
    ({"weight": jnp.zeros((3, 4))}, "weight must have shape (dim, width)"),
    ({"bias": jnp.zeros((5,))}, "bias must have shape (dim,)"),
    ({"activation": "relu"}, "activation must be one of"),
    ({"initial_states": jnp.zeros((2, 4, 4))}, "initial_states must have shape (batch, width - 1, dim)"),
    ({"seq_idx": jnp.zeros((2, 5), jnp.int32), "return_final_states": True}, "seq_idx cannot be combined"),
    ({"seq_idx": jnp.zeros((2, 4), jnp.int32)}, "seq_idx must have shape (batch, L)"),
]


@pytest.mark.parametrize("override,message", BAD)
def test_bad_arguments_name_the_argument(override, message):
    good = {"x": jnp.zeros((2, 5, 4)), "weight": jnp.zeros((4, 4)), "bias": jnp.zeros((4,))}
    with pytest.raises(ValueError, match=re.escape(message)):
        causal_conv1d_fn(**{**good, **override})
