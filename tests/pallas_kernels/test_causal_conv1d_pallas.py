"""Pallas causal conv1d in interpret mode (CPU): forward and every gradient against the float64 oracle and the
forward against the pure-JAX reference, over awkward shapes and tilings (L of 1 and not a multiple of the block,
channels not a multiple of the block, widths 1-4, packed sequences), and its refusals.

Interpret mode fills every output buffer with NaN before the kernel runs, so an element a kernel fails to write
fails the finiteness check in ``assert_close``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.tolerances import assert_close
from pallas_kernels import causal_conv1d_fn
from pallas_kernels.causal_conv1d.config import ConvConfig
from tests.pallas_kernels import naive
from tests.pallas_kernels.test_ssd_reference import random_seq_idx

SMALL = ConvConfig(block_l=8, block_d=4, num_warps=1, bwd_block_l=4, bwd_block_d=8, bwd_num_warps=1)  # many blocks
CASES = [  # batch, L, dim, width, dtype, bias, silu, seq_idx, config
    (2, 1, 8, 4, jnp.float32, True, True, False, SMALL),
    (1, 7, 3, 2, jnp.float32, False, False, False, SMALL),
    (2, 37, 13, 4, jnp.float32, True, True, True, SMALL),
    (3, 64, 5, 3, jnp.bfloat16, True, False, False, SMALL),
    (1, 50, 8, 1, jnp.float16, True, True, True, SMALL),
    (2, 129, 20, 4, jnp.bfloat16, True, True, True, None),  # the default tiling
]


@pytest.mark.parametrize("batch,seqlen,dim,width,dtype,has_bias,silu,seq,config", CASES)
def test_forward_and_gradients_match_oracle_and_reference(
    rng, batch, seqlen, dim, width, dtype, has_bias, silu, seq, config
):
    x = jnp.asarray(rng.normal(size=(batch, seqlen, dim)), dtype)
    weight = jnp.asarray(rng.normal(size=(dim, width)) / np.sqrt(width), jnp.float32)
    bias = jnp.asarray(rng.normal(size=dim), jnp.float32) if has_bias else None
    seq_idx = random_seq_idx(rng, batch, seqlen) if seq and seqlen > 1 else None
    activation = "silu" if silu else None

    def run(impl, x, weight, bias):
        kw = dict(seq_idx=None if seq_idx is None else jnp.asarray(seq_idx), activation=activation, impl=impl)
        return causal_conv1d_fn(x, weight, bias, **kw, config=config if impl == "pallas" else None)

    out, vjp = jax.vjp(jax.jit(lambda *a: run("pallas", *a)), x, weight, bias)
    dout = jnp.asarray(rng.normal(size=out.shape), dtype)
    dx, dw, db = vjp(dout)
    exact = [None if a is None else np.asarray(a.astype(jnp.float32), np.float64) for a in (x, weight, bias)]
    args = (*exact, seq_idx, None, silu)
    want, _ = naive.conv_forward(*args)
    want_dx, want_dw, want_db, _ = naive.conv_backward(np.asarray(dout.astype(jnp.float32), np.float64), *args)
    assert out.dtype == dtype and dx.dtype == dtype and dw.dtype == jnp.float32
    assert_close("out", out, want, dtype)
    assert_close("out vs reference", out, run("reference", x, weight, bias), dtype)
    assert_close("dx", dx, want_dx, dtype)
    assert_close("dweight", dw, want_dw, dtype)
    if has_bias:
        assert_close("dbias", db, want_db, dtype)


def test_channels_first_layout(rng):
    x = jnp.asarray(rng.normal(size=(2, 6, 19)), jnp.float32)  # (batch, dim, L)
    weight = jnp.asarray(rng.normal(size=(6, 4)), jnp.float32)
    got = causal_conv1d_fn(x, weight, layout="channels_first", activation="silu", impl="pallas", config=SMALL)
    want = causal_conv1d_fn(x, weight, layout="channels_first", activation="silu")
    assert_close("out", got, want, jnp.float32)


def test_unsupported_arguments_are_refused_before_work(rng):
    x = jnp.zeros((1, 5, 4), jnp.float32)
    weight = jnp.zeros((4, 4), jnp.float32)
    with pytest.raises(ValueError, match="impl='pallas' does not take initial_states or return_final_states"):
        causal_conv1d_fn(x, weight, return_final_states=True, impl="pallas")
    with pytest.raises(ValueError, match="impl='pallas' does not take initial_states"):
        causal_conv1d_fn(x, weight, initial_states=jnp.zeros((1, 3, 4)), impl="pallas")
    with pytest.raises(ValueError, match=r"ConvConfig\.block_l must be a positive power of two, got 6"):
        causal_conv1d_fn(x, weight, impl="pallas", config=ConvConfig(block_l=6))
    with pytest.raises(ValueError, match="config must be an instance of ConvConfig"):
        causal_conv1d_fn(x, weight, impl="pallas", config={"block_l": 8})
