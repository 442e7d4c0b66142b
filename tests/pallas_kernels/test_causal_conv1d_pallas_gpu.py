"""On a GPU (marked ``gpu``): the compiled Pallas causal conv1d at the Mamba-1 130m layer's shape in bf16, by default
(Mosaic GPU on Hopper), on Triton, and with packed sequences (Triton), and its Mosaic GPU kernels at that shape
behind Triton's forward, at a long sequence, with a partial last block, a sequence shorter than a block and initial
states, forward and every gradient, against the pure-JAX reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import causal_conv1d_fn
from pallas_kernels.causal_conv1d.config import ConvConfig
from tests.pallas_kernels.test_ssd_reference import random_seq_idx

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "packed,config",
    [(False, None), (False, ConvConfig(backend="triton")), (True, None)],
    ids=["auto", "triton", "packed"],
)
def test_compiled_kernel_matches_reference_at_the_130m_shape(rng, packed, config):
    batch, seqlen, dim = 8, 2048, 1536
    x = jnp.asarray(rng.normal(size=(batch, seqlen, dim)), jnp.bfloat16)
    weight = jnp.asarray(rng.normal(size=(dim, 4)) / 2, jnp.float32)
    bias = jnp.asarray(rng.normal(size=dim), jnp.float32)
    seq_idx = jnp.asarray(random_seq_idx(rng, batch, seqlen)) if packed else None
    dout = jnp.asarray(rng.normal(size=x.shape), jnp.bfloat16)

    def grads(impl):
        def run(*a):
            return causal_conv1d_fn(*a, seq_idx=seq_idx, activation="silu", impl=impl, config=config)

        out, vjp = jax.vjp(jax.jit(run), x, weight, bias)
        return [np.asarray(t.astype(jnp.float32)) for t in (out, *vjp(dout))]

    for name, got, want in zip(("out", "dx", "dweight", "dbias"), grads("pallas"), grads("reference"), strict=True):
        assert_close(name, got, want, jnp.bfloat16)


MOSAIC = ConvConfig(backend="mosaic_gpu")


@pytest.mark.parametrize(
    "batch,seqlen,dim,width,init,config",
    [
        (8, 2048, 1536, 4, False, MOSAIC),
        (8, 2048, 1536, 4, False, ConvConfig(backend="triton", bwd_backend="mosaic_gpu")),
        (1, 16384, 1536, 2, False, MOSAIC),
        (2, 1000, 256, 4, False, MOSAIC),
        (2, 1024, 256, 4, True, MOSAIC),
        (3, 5, 384, 4, True, MOSAIC),
    ],
    ids=["130m", "130m-triton-forward", "long-width-2", "partial-block", "initial-states", "short-initial-states"],
)
def test_compiled_mosaic_gpu_kernels_match_reference(rng, batch, seqlen, dim, width, init, config):
    """A partial last block runs over whole rows of a batch of 2, whose rows past L must not land on the next batch
    row; a sequence of 5 is one partial block."""
    x = jnp.asarray(rng.normal(size=(batch, seqlen, dim)), jnp.bfloat16)
    weight = jnp.asarray(rng.normal(size=(dim, width)) / 2, jnp.float32)
    bias = jnp.asarray(rng.normal(size=dim), jnp.float32)
    states = jnp.asarray(rng.normal(size=(batch, width - 1, dim)), jnp.bfloat16) if init else None
    dout = jnp.asarray(rng.normal(size=x.shape), jnp.bfloat16)

    def pallas(*a):
        return causal_conv1d_fn(*a, initial_states=states, activation="silu", impl="pallas", config=config)

    def reference(*a):
        return causal_conv1d_fn(*a, initial_states=states, activation="silu", impl="reference")

    def grads(run):
        out, pull = jax.vjp(jax.jit(run), x, weight, bias)
        return [np.asarray(t.astype(jnp.float32)) for t in (out, *pull(dout))]

    for name, got, want in zip(("out", "dx", "dweight", "dbias"), grads(pallas), grads(reference), strict=True):
        assert_close(name, got, want, jnp.bfloat16)
