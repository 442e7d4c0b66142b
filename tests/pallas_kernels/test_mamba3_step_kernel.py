"""Mamba-3's decoding steps with ``impl="pallas"``: the state update on the Mosaic GPU step kernel (in Pallas's GPU
interpreter, which fills every output with NaN before the kernel runs). One step's output and new states against the
float64 oracle run on that one step, for SISO and MIMO, over head dims of one and two 64-row tiles, N from 8 to 128,
one and two groups, with and without input states, D and Z, bfloat16 and float32 V, a float32 and a bfloat16 state;
the gradient (the reference's) and where the reference runs instead."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels.mamba3 import dispatch
from pallas_kernels.mamba3.api import mamba3_mimo_step, mamba3_siso_step
from tests.pallas_kernels import naive_mamba3
from tests.pallas_kernels.test_mamba3_kernels import rounded, to_jax
from tests.pallas_kernels.test_mamba3_mimo_reference import mimo_inputs, steps_of
from tests.pallas_kernels.test_mamba3_reference import assert_angles_close, random_inputs

BF16 = jnp.bfloat16


def check_step(out, new, want, want_finals, out_dtype, state_dtype) -> None:
    """A step's out and new (angle, ssm, k, v) against the oracle's one-step run (its L axis of 1 dropped)."""
    assert out.dtype == out_dtype and out.shape == want[:, 0].shape
    assert_close("out", out, want[:, 0], out_dtype)
    assert_angles_close("angle", new[0], want_finals[0])
    assert new[1].dtype == state_dtype
    assert_close("ssm", new[1], want_finals[1], state_dtype)
    for name, got, expected in zip(("k", "v"), new[2:], want_finals[2:], strict=True):
        assert_close(name, got, expected, jnp.float32)


SISO_CASES = [  # batch, groups, heads, headdim, N, S, D, Z, input states, V dtype, ssm state dtype
    (2, 1, 2, 64, 16, 4, True, True, True, BF16, jnp.float32),
    (1, 2, 4, 128, 8, 2, False, True, False, jnp.float32, jnp.float32),  # two row tiles, N 8, zeros for states
    (3, 2, 2, 64, 128, 16, True, False, True, BF16, BF16),  # a 16-bit state cache stays 16-bit
]


@pytest.mark.parametrize("batch,groups,heads,headdim,dstate,pairs,has_d,has_z,has_states,dtype,state_dtype", SISO_CASES)
def test_siso_step_matches_the_oracle(
    rng, batch, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states, dtype, state_dtype
):
    assert dispatch.on_step_kernel(dtype, headdim, dstate)
    args, states = random_inputs(rng, batch, 1, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states)
    if dtype == BF16:
        args, states = rounded(args, states)
        jargs, jstates = to_jax(args, states)
    else:
        jargs = {k: None if v is None else jnp.asarray(v, dtype) for k, v in args.items()}
        jstates = None if states is None else tuple(jnp.asarray(s, dtype) for s in states)
    if jstates is not None:
        ssm = jstates[1].astype(state_dtype)
        states = (states[0], np.asarray(ssm, np.float64), *states[2:])
        jstates = (jstates[0], ssm, *jstates[2:])
    out, new = jax.jit(lambda a, s: mamba3_siso_step(**steps_of(a, 0), Input_States=s, impl="pallas"))(jargs, jstates)
    want, want_finals = naive_mamba3.mamba3_forward(**args, states=states)
    check_step(out, new, want, want_finals, dtype, state_dtype if has_states else jnp.float32)


@pytest.mark.parametrize("has_out,has_states", [(True, True), (False, False)])
def test_mimo_step_matches_the_oracle(rng, has_out, has_states):
    """Rank 4 (eight rank-1 terms and four read-outs a step), the ranks summed by MIMO_Out or unsummed."""
    args, states = rounded(*mimo_inputs(rng, 2, 1, 4, 1, 2, 64, 16, 4, True, True, has_out, True))
    states = states if has_states else None
    jargs, jstates = to_jax(args, states)
    step = jax.jit(lambda a, s: mamba3_mimo_step(**steps_of(a, 0), Input_States=s, impl="pallas"))
    out, new = step(jargs, jstates)
    want, want_finals = naive_mamba3.mamba3_mimo_forward(**args, states=states)
    check_step(out, new, want, want_finals, BF16, jnp.float32)


def test_step_gradient_is_the_references(rng):
    """Decoding does not differentiate, but a gradient taken through the kernel's step is the reference's."""
    args, states = random_inputs(rng, 2, 1, 1, 2, 64, 16, 4, True, True, True)
    jargs = {k: None if v is None else jnp.asarray(v, jnp.float32) for k, v in args.items()}
    jstates = tuple(jnp.asarray(s, jnp.float32) for s in states)
    weights = jnp.asarray(rng.normal(size=(2, 2, 64, 16)), jnp.float32)

    def loss(impl, values, ssm):
        out, new = mamba3_siso_step(**steps_of(values, 0), Input_States=(jstates[0], ssm, *jstates[2:]), impl=impl)
        return jnp.sum(out**2) + jnp.sum(new[1] * weights)

    grads = {impl: jax.grad(loss, argnums=(1, 2))(impl, jargs, jstates[1]) for impl in ("pallas", "reference")}
    for name in ("Q", "K", "V", "ADT", "DT", "Trap", "Z"):
        assert_close(f"d{name}", grads["pallas"][0][name], grads["reference"][0][name], jnp.float32)
    assert_close("d ssm", grads["pallas"][1], grads["reference"][1], jnp.float32)


def test_the_reference_updates_states_the_kernel_does_not_take():
    """Head dims not in whole 64-row tiles, N not in 8-column tiles, float64 arithmetic: the reference's update."""
    assert not dispatch.on_step_kernel(BF16, 48, 16)
    assert not dispatch.on_step_kernel(BF16, 64, 12)
    assert not dispatch.on_step_kernel(jnp.float64, 64, 16)
    assert dispatch._step_for(BF16, 48, 16) is None
