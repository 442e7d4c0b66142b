"""Pallas causal conv1d in interpret mode (CPU), both backends (Triton, and Mosaic GPU where the config asks for it):
forward and every gradient against the float64 oracle and the forward against the pure-JAX reference, over awkward
shapes and tilings (L of 1 and not a multiple of the block, channels not a multiple of the block, widths 1-4, packed
sequences, initial states, L shorter than them), the final states, and the refusals.

Interpret mode fills every output buffer with NaN before the kernel runs, so an element a kernel fails to write
fails the finiteness check in ``assert_close``."""

import dataclasses
import re

import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import causal_conv1d_fn
from pallas_kernels.causal_conv1d.config import ConvConfig
from tests.pallas_kernels import naive
from tests.pallas_kernels.one_program import forward_and_backward
from tests.pallas_kernels.test_ssd_reference import random_seq_idx

SMALL = ConvConfig(block_l=8, block_d=4, num_warps=1, bwd_block_l=4, bwd_block_d=8, bwd_num_warps=1)  # many blocks
MOSAIC_SMALL = ConvConfig(backend="mosaic_gpu", mosaic_block_l=8, mosaic_segment_blocks=2)  # many segments
MOSAIC_NARROW = dataclasses.replace(MOSAIC_SMALL, mosaic_block_d=128, mosaic_unroll=4)  # 4 steps an iteration
CASES = [  # batch, L, dim, width, dtype, bias, silu, seq_idx, initial states, config
    (2, 1, 8, 4, jnp.float32, True, True, False, False, SMALL),
    (1, 7, 3, 2, jnp.float32, False, False, False, False, SMALL),
    (2, 37, 13, 4, jnp.float32, True, True, True, False, SMALL),
    (3, 64, 5, 3, jnp.bfloat16, True, False, False, False, SMALL),
    (1, 50, 8, 1, jnp.float16, True, True, True, False, SMALL),
    (2, 129, 20, 4, jnp.bfloat16, True, True, True, False, None),  # the default tiling
    # initial states: L 1 and 2, shorter than them (width 4), several blocks, width 2 and 1, the default tiling
    (2, 1, 8, 4, jnp.float32, True, True, False, True, SMALL),
    (1, 2, 6, 4, jnp.float32, False, False, False, True, SMALL),
    (2, 37, 13, 4, jnp.float32, True, True, False, True, SMALL),
    (1, 7, 3, 2, jnp.bfloat16, True, False, False, True, SMALL),
    (1, 9, 5, 1, jnp.float32, True, True, False, True, SMALL),
    (1, 70, 20, 4, jnp.bfloat16, True, True, False, True, None),
    # the Mosaic GPU kernels (dim a multiple of 128): several segments and a partial last block, L 1 with initial
    # states, 256 channels a program and 128 of 256 (4 steps a loop iteration), width 1, the default blocks
    (2, 37, 128, 4, jnp.float32, True, True, False, False, MOSAIC_SMALL),
    (1, 1, 128, 4, jnp.float32, True, True, False, True, MOSAIC_SMALL),
    (3, 70, 256, 2, jnp.bfloat16, False, False, False, True, MOSAIC_SMALL),
    (1, 20, 256, 4, jnp.float32, True, True, False, False, MOSAIC_NARROW),
    # Triton's forward with Mosaic GPU's backward (their dw partials differ in count: the VJP sums either)
    (2, 37, 128, 3, jnp.bfloat16, True, True, False, True, dataclasses.replace(SMALL, bwd_backend="mosaic_gpu")),
    (1, 9, 128, 1, jnp.float16, True, True, False, False, MOSAIC_SMALL),
    (2, 129, 128, 3, jnp.bfloat16, True, True, False, True, ConvConfig(backend="mosaic_gpu")),
]


@pytest.mark.parametrize("batch,seqlen,dim,width,dtype,has_bias,silu,seq,init,config", CASES)
def test_forward_and_gradients_match_oracle_and_reference(
    rng, batch, seqlen, dim, width, dtype, has_bias, silu, seq, init, config
):
    x = jnp.asarray(rng.normal(size=(batch, seqlen, dim)), dtype)
    weight = jnp.asarray(rng.normal(size=(dim, width)) / np.sqrt(width), jnp.float32)
    bias = jnp.asarray(rng.normal(size=dim), jnp.float32) if has_bias else None
    states = jnp.asarray(rng.normal(size=(batch, width - 1, dim)), dtype) if init else None
    seq_idx = random_seq_idx(rng, batch, seqlen) if seq and seqlen > 1 else None
    activation = "silu" if silu else None

    def run(impl, x, weight, bias, states):
        kw = dict(seq_idx=None if seq_idx is None else jnp.asarray(seq_idx), activation=activation, impl=impl)
        kw["initial_states"] = states
        return causal_conv1d_fn(x, weight, bias, **kw, config=config if impl == "pallas" else None)

    dout = jnp.asarray(rng.normal(size=x.shape), dtype)
    out, (dx, dw, db, dstates) = forward_and_backward(lambda *a: run("pallas", *a), (x, weight, bias, states), dout)
    exact = [None if a is None else np.asarray(a.astype(jnp.float32), np.float64) for a in (x, weight, bias, states)]
    args = (*exact[:3], seq_idx, exact[3], silu)
    want, _ = naive.conv_forward(*args)
    want_dx, want_dw, want_db, want_dstates = naive.conv_backward(
        np.asarray(dout.astype(jnp.float32), np.float64), *args
    )
    assert out.dtype == dtype and dx.dtype == dtype and dw.dtype == jnp.float32
    assert_close("out", out, want, dtype)
    assert_close("out vs reference", out, run("reference", x, weight, bias, states), dtype)
    assert_close("dx", dx, want_dx, dtype)
    assert_close("dweight", dw, want_dw, dtype)
    if has_bias:
        assert_close("dbias", db, want_db, dtype)
    if init:
        assert dstates.dtype == dtype
        assert_close("dinitial_states", dstates, want_dstates, dtype)


@pytest.mark.parametrize("seqlen,init", [(9, True), (2, True), (2, False)])
def test_final_states_are_the_last_inputs(rng, seqlen, init):
    """return_final_states: the width - 1 inputs before the next step, from the initial states where L is shorter."""
    x = jnp.asarray(rng.normal(size=(2, seqlen, 5)), jnp.float32)
    weight = jnp.asarray(rng.normal(size=(5, 4)), jnp.float32)
    states = jnp.asarray(rng.normal(size=(2, 3, 5)), jnp.float32) if init else None
    kw = dict(initial_states=states, return_final_states=True, activation="silu")
    out, final = causal_conv1d_fn(x, weight, **kw, impl="pallas", config=SMALL)
    want_out, want_final = causal_conv1d_fn(x, weight, **kw)
    assert_close("out", out, want_out, jnp.float32)
    np.testing.assert_array_equal(np.asarray(final), np.asarray(want_final))


def test_channels_first_layout(rng):
    x = jnp.asarray(rng.normal(size=(2, 6, 19)), jnp.float32)  # (batch, dim, L)
    weight = jnp.asarray(rng.normal(size=(6, 4)), jnp.float32)
    got = causal_conv1d_fn(x, weight, layout="channels_first", activation="silu", impl="pallas", config=SMALL)
    want = causal_conv1d_fn(x, weight, layout="channels_first", activation="silu")
    assert_close("out", got, want, jnp.float32)


def test_unsupported_arguments_are_refused_before_work(rng):
    x = jnp.zeros((1, 5, 4), jnp.float32)
    weight = jnp.zeros((4, 4), jnp.float32)
    with pytest.raises(ValueError, match=r"initial_states must have shape \(batch, width - 1, dim\)"):
        causal_conv1d_fn(x, weight, initial_states=jnp.zeros((1, 2, 4)), impl="pallas")
    with pytest.raises(ValueError, match=r"ConvConfig\.bwd_backend must be '' or one of"):
        causal_conv1d_fn(x, weight, impl="pallas", config=ConvConfig(bwd_backend="cuda"))
    with pytest.raises(ValueError, match=r"ConvConfig\.mosaic_unroll must be at most mosaic_block_l \(32\), got 128"):
        causal_conv1d_fn(x, weight, impl="pallas", config=ConvConfig(backend="mosaic_gpu", mosaic_unroll=128))
    with pytest.raises(ValueError, match=r"ConvConfig\.mosaic_block_d must be 128 or 256, got 64"):
        causal_conv1d_fn(x, weight, impl="pallas", config=ConvConfig(backend="mosaic_gpu", mosaic_block_d=64))
    with pytest.raises(ValueError, match=r"ConvConfig\.block_l must be a positive power of two, got 6"):
        causal_conv1d_fn(x, weight, impl="pallas", config=ConvConfig(block_l=6))
    with pytest.raises(ValueError, match="config must be an instance of ConvConfig"):
        causal_conv1d_fn(x, weight, impl="pallas", config={"block_l": 8})


@pytest.mark.parametrize(
    "dim,width,packed,message",
    [
        (100, 4, False, "dim must be a multiple of 128, got 100"),
        (128, 11, False, "width must be at most 9, got 11"),
        (128, 4, True, "seq_idx"),
    ],
)
def test_mosaic_gpu_backend_refuses_what_it_does_not_cover(dim, width, packed, message):
    x = jnp.zeros((1, 16, dim), jnp.float32)
    weight = jnp.zeros((dim, width), jnp.float32)
    seq_idx = jnp.zeros((1, 16), jnp.int32) if packed else None
    with pytest.raises(ValueError, match=re.escape(f"ConvConfig(backend='mosaic_gpu'): {message}")):
        causal_conv1d_fn(x, weight, seq_idx=seq_idx, impl="pallas", config=MOSAIC_SMALL)
    with pytest.raises(ValueError, match=re.escape(f"ConvConfig(bwd_backend='mosaic_gpu'): {message}")):
        causal_conv1d_fn(x, weight, seq_idx=seq_idx, impl="pallas", config=ConvConfig(bwd_backend="mosaic_gpu"))
    with pytest.raises(ValueError, match=r"ConvConfig\.backend must be one of"):
        causal_conv1d_fn(x, weight, impl="pallas", config=ConvConfig(backend="cuda"))


@pytest.mark.parametrize(
    "dim,width,packed,hopper,interpret,expected",
    [
        (1536, 4, False, True, False, "mosaic_gpu"),
        (128, 9, False, True, False, "mosaic_gpu"),
        (1536, 4, True, True, False, "triton"),
        (100, 4, False, True, False, "triton"),
        (128, 11, False, True, False, "triton"),
        (1536, 4, False, False, False, "triton"),
        (1536, 4, False, True, True, "triton"),
    ],
)
def test_auto_backend_takes_mosaic_gpu_wherever_it_covers_the_call(
    monkeypatch, dim, width, packed, hopper, interpret, expected
):
    """The default config's backend per pass: Mosaic GPU compiled on Hopper for dims a multiple of 128, widths up to
    9 and no seq_idx; Triton otherwise (interpreted too). A pass named explicitly keeps its backend."""
    from pallas_kernels.causal_conv1d import dispatch

    monkeypatch.setattr(dispatch, "gpu_has_wgmma", lambda: hopper)

    def chosen(config):
        config = dispatch.choose_backends((2, 1000, dim), width, packed, config, interpret)
        return config.backend, config.bwd_backend

    assert chosen(ConvConfig()) == (expected, expected)
    assert chosen(ConvConfig(bwd_backend="triton")) == (expected, "triton")
    assert chosen(ConvConfig(backend="triton", bwd_backend="auto")) == ("triton", expected)
