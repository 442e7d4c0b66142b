"""``ssd_final_state`` (the SSD's final state without its outputs, for context parallelism) against the float64
recurrence oracle, forward and every gradient, on shapes with one position, odd lengths and several groups; its float32
gradients (dA, d dt_bias) from bf16 inputs at float32's tolerance; and its argument checks."""

import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels.ssd.api import ssd_final_state
from tests.pallas_kernels.one_program import forward_and_backward
from tests.pallas_kernels.test_ssd_reference import make_inputs, oracle_with_spread

INF = float("inf")
STATE_INPUTS = ("x", "dt", "A", "B", "dt_bias")

CASES = [  # batch, L, H, P, N, G, dtype, softplus, dt_limit
    (2, 1, 4, 8, 16, 1, jnp.float32, True, (0.0, INF)),
    (1, 100, 4, 4, 8, 2, jnp.float32, True, (0.0, INF)),
    (2, 256, 2, 8, 16, 1, jnp.float32, True, (0.01, 0.3)),
    (1, 97, 6, 4, 4, 3, jnp.bfloat16, True, (0.0, INF)),
    (2, 64, 4, 4, 8, 4, jnp.bfloat16, False, (0.0, INF)),
    (3, 37, 4, 2, 4, 2, jnp.float16, True, (0.0, INF)),
]


def run_against_oracle(rng, batch, seqlen, nheads, headdim, dstate, groups, dtype, softplus, dt_limit):
    """Fresh inputs; ``ssd_final_state``'s final state and {input name: gradient} (jit, backpropagating a random
    cotangent) beside the float64 oracle's (final state, gradients, spread of the summed ones), with the inputs."""
    arrays, exact, _ = make_inputs(
        rng, batch, seqlen, nheads, headdim, dstate, groups, dtype, D=None, z=False, init=False, softplus=softplus
    )
    names = [k for k in STATE_INPUTS if arrays[k] is not None]
    dfinal = rng.normal(size=(batch, nheads, headdim, dstate))

    def run(*values):
        inputs = dict(zip(names, values, strict=True))
        return ssd_final_state(**inputs, dt_softplus=softplus, dt_limit=dt_limit)

    final, grads = forward_and_backward(run, [arrays[k] for k in names], jnp.asarray(dfinal, jnp.float32))
    grads = dict(zip(names, grads, strict=True))
    no_outputs = np.zeros((batch, seqlen, nheads, headdim))  # the state alone: the outputs' cotangent is zero
    _, want_final, want_grads, spread = oracle_with_spread(exact, None, softplus, dt_limit, no_outputs, dfinal)
    return arrays, final, grads, want_final, want_grads, spread


@pytest.mark.parametrize("batch,seqlen,nheads,headdim,dstate,groups,dtype,softplus,dt_limit", CASES)
def test_final_state_and_its_gradients_match_the_oracle(
    rng, batch, seqlen, nheads, headdim, dstate, groups, dtype, softplus, dt_limit
):
    arrays, final, grads, want_final, want_grads, spread = run_against_oracle(
        rng, batch, seqlen, nheads, headdim, dstate, groups, dtype, softplus, dt_limit
    )
    assert final.dtype == jnp.float32 and final.shape == (batch, nheads, headdim, dstate)
    assert_close("final_states", final, want_final, dtype)  # operands in the inputs' dtype, as the kernels'
    for name, grad in grads.items():
        assert grad.dtype == arrays[name].dtype, name
        want = want_grads[name]
        floor = float(np.max(spread[name])) if name in spread else 0.0  # sums over batch and L (dA, d dt_bias)
        assert_close(f"d{name}", grad, want, dtype, floor=floor)  # dA, d dt_bias: float32 from dtype operands


@pytest.mark.parametrize(
    "batch,seqlen,nheads,groups,softplus", [(2, 64, 4, 4, False), (1, 300, 6, 2, True), (3, 1, 2, 1, True)]
)
def test_float32_gradients_keep_float32_accuracy_from_bf16_inputs(rng, batch, seqlen, nheads, groups, softplus):
    """dA and d dt_bias (float32) from bf16 inputs, as exact as float32 arithmetic on those inputs: the weights'
    cotangent stays float32 (the contraction's own VJP). Rounded to bf16 it put dA 1.5e-2 from the oracle at B2 L64
    (CI, TEST_SEED=373422092): dA multiplies it by the rest of the sequence's dt sum, terms far larger than dA."""
    arrays, _, grads, _, want_grads, spread = run_against_oracle(
        rng, batch, seqlen, nheads, 8, 16, groups, jnp.bfloat16, softplus, (0.0, INF)
    )
    for name in ("A", "dt_bias"):
        if arrays[name] is not None:
            assert grads[name].dtype == jnp.float32, name
            floor = float(np.max(spread[name]))
            assert_close(f"d{name}", grads[name], want_grads[name], jnp.float32, floor=floor)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(x=jnp.zeros((2, 8, 4))), r"x must have rank 4"),
        (dict(dt=jnp.zeros((2, 9, 4))), r"dt must have shape \(batch, L, H\)"),
        (dict(A=jnp.zeros((4,), jnp.bfloat16)), r"A must be float32"),
        (dict(B=jnp.zeros((2, 8, 3, 16))), r"B groups \(G\)"),
        (dict(dt_bias=jnp.zeros((5,))), r"dt_bias must have shape \(H,\)"),
        (dict(dt_limit=(1.0, 0.0)), r"dt_limit must be a pair"),
    ],
)
def test_refuses_bad_arguments_by_name(change, message):
    args = dict(
        x=jnp.zeros((2, 8, 4, 8)), dt=jnp.zeros((2, 8, 4)), A=-jnp.ones((4,)), B=jnp.zeros((2, 8, 2, 16)),
        dt_bias=jnp.zeros((4,)), dt_limit=(0.0, INF),
    )  # fmt: skip
    with pytest.raises(ValueError, match=message):
        ssd_final_state(**{**args, **change})
