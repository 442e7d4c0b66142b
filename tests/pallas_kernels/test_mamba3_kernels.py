"""Mamba-3's SISO op on the Pallas kernels (``impl="pallas"``: the SSD's Mosaic GPU kernels in Pallas's GPU
interpreter, which fills every output with NaN before a kernel runs): outputs and final states against the float64
oracle (a loop over the recurrence) on the same bfloat16 inputs, every gradient against the JAX reference's autodiff
(itself checked against central differences of the oracle in test_mamba3_reference.py), over awkward shapes (L of 1
and not a multiple of the kernels' 64-step blocks, head dims and N that are padded, several groups, input states),
the walk in segments, packed sequences, and the float32 path."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.tolerances import REFERENCE_FACTOR, assert_close, rel_l2, tolerance
from pallas_kernels.mamba3 import dispatch
from pallas_kernels.mamba3.api import mamba3_siso_combined
from pallas_kernels.mamba3.siso_scan import mamba3_siso_kernels
from pallas_kernels.ssd.config import SsdConfig
from tests.pallas_kernels import naive_mamba3
from tests.pallas_kernels.test_mamba3_reference import assert_angles_close, random_inputs, steps_of

BF16 = jnp.bfloat16
# The rotary angles' gradients run through q and k turned per head and their gradients, both rounded to bfloat16 by
# the kernels (as by mamba-ssm's), then through a running sum over L, which cancels: rounding only those values in the
# float32 reference moves d Angles by 0.9-2.3% and d input angle by 1.4-3.4% (relative L2, three seeds at this file's
# first case). Their bound (and DT's, which the angles' increments scale) is that many times the bfloat16 one.
ANGLE_PATH = {"Angles": 4.0, "DT": 4.0, "angle": 4.0}


def rounded(args: dict, states):
    """The inputs as the kernels get them: bfloat16 Q, K, V, Z and input v (float64 copies for the oracle), the
    per-step and per-head values float32."""
    low = {"Q", "K", "V", "Z"}
    as_np = lambda a, low: None if a is None else np.asarray(jnp.asarray(a, BF16 if low else jnp.float32), np.float64)  # noqa: E731
    args = {k: as_np(v, k in low) for k, v in args.items()}
    states = None if states is None else tuple(as_np(s, i == 3) for i, s in enumerate(states))
    return args, states


def to_jax(args: dict, states):
    low = {"Q", "K", "V", "Z"}
    to = lambda a, low: None if a is None else jnp.asarray(a, BF16 if low else jnp.float32)  # noqa: E731
    jstates = None if states is None else tuple(to(s, i == 3) for i, s in enumerate(states))
    return {k: to(v, k in low) for k, v in args.items()}, jstates


def check_against_oracle(out, finals, args, states, cu_bounds=None):
    """out and final states against the float64 oracle, per packed sequence where ``cu_bounds`` is given."""
    if cu_bounds is None:
        want, want_finals = naive_mamba3.mamba3_forward(**args, states=states)
    else:
        outs, per_seq = [], []
        for i, (start, end) in enumerate(itertools.pairwise(cu_bounds)):
            own = None if states is None else tuple(s[i : i + 1] for s in states)
            o, f = naive_mamba3.mamba3_forward(**steps_of(args, slice(start, end)), states=own)
            outs.append(o)
            per_seq.append(f)
        want = np.concatenate(outs, axis=1)
        want_finals = [np.concatenate(parts) for parts in zip(*per_seq, strict=True)]
    assert out.dtype == BF16 and out.shape == want.shape
    assert_close("out", out, want, BF16)
    assert_angles_close("final angle", finals[0], want_finals[0])
    for name, got, expected in zip(("ssm", "k", "v"), finals[1:], want_finals[1:], strict=True):
        assert_close(f"final {name}", got, expected, BF16)


CASES = [  # batch, L, groups, heads, headdim, N, S, D, Z, input states
    (2, 70, 1, 2, 16, 16, 4, True, True, True),  # L past one block, P and N padded to 64
    (1, 1, 2, 2, 64, 64, 8, False, True, False),  # one step, two groups
    (1, 128, 2, 4, 64, 128, 16, True, False, True),  # whole blocks, N of 128 (the dB/dC kernel's 128 columns)
]


@pytest.mark.parametrize("batch,seqlen,groups,heads,headdim,dstate,pairs,has_d,has_z,has_states", CASES)
def test_kernels_match_the_oracle_and_the_reference_gradients(
    rng, batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states
):
    args, states = rounded(
        *random_inputs(rng, batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, True)
    )
    states = states if has_states else None
    jargs, jstates = to_jax(args, states)

    def run(impl):
        def loss(kw, st, dout, dssm):
            out, *finals = mamba3_siso_combined(**kw, Input_States=st, return_final_states=True, impl=impl)
            return jnp.sum(out.astype(jnp.float32) * dout) + jnp.sum(finals[1] * dssm), (out, finals)

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))

    dout = jnp.asarray(rng.normal(size=(batch, seqlen, heads, headdim)), jnp.float32)
    dssm = jnp.asarray(rng.normal(size=(batch, heads, headdim, dstate)), jnp.float32)
    (_, (out, finals)), grads = run("pallas")(jargs, jstates, dout, dssm)
    check_against_oracle(out, finals, args, states)
    _, rounded_reference = run("reference")(jargs, jstates, dout, dssm)
    _, exact = run("reference")(*as_float32(jargs, jstates), dout, dssm)
    for name, got in grads[0].items():
        if got is not None:
            assert_gradient_close(
                f"d{name}", got, rounded_reference[0][name], exact[0][name], ANGLE_PATH.get(name, 1.0)
            )
    if has_states:
        for i, name in enumerate(("angle", "ssm", "k", "v")):
            want = (rounded_reference[1][i], exact[1][i])
            assert_gradient_close(f"d input {name} state", grads[1][i], *want, ANGLE_PATH.get(name, 1.0))


def as_float32(jargs: dict, jstates):
    """The same values in float32: the reference's exact answer for the kernels' inputs."""
    up = lambda a: None if a is None else a.astype(jnp.float32)  # noqa: E731
    return {k: up(v) for k, v in jargs.items()}, None if jstates is None else tuple(map(up, jstates))


def assert_gradient_close(name: str, got, rounded_reference, exact, scale: float = 1.0) -> None:
    """A kernel gradient against the reference's in float32 on the same inputs, within the bfloat16 tolerance (times
    ``scale``) or twice the reference's own error with bfloat16 inputs and outputs, whichever is larger: some
    gradients (a few numbers summed from many that cancel) are that far off in bfloat16 whatever computes them."""
    assert np.all(np.isfinite(np.asarray(got, np.float32))), name
    noise = rel_l2(rounded_reference, exact) / tolerance(BF16)
    assert_close(name, got, exact, BF16, max(scale, REFERENCE_FACTOR * noise))


def test_the_walk_in_segments_matches_the_oracle(rng):
    """Three blocks in segments of two: each segment's end state, the walk over segments, then the forward walk per
    segment from its incoming state (and the same in reverse for the gradients, against the reference's)."""
    args, states = rounded(*random_inputs(rng, 1, 150, 1, 2, 64, 64, 4, True, True, True))
    jargs, jstates = to_jax(args, states)
    config = SsdConfig(two_level_states=True, fused_segments=True, state_segment=128)

    def loss(kw, st, run):
        out, finals = run(**kw, states=st)
        return jnp.sum(out.astype(jnp.float32) * jnp.cos(jnp.arange(out.size).reshape(out.shape))), (out, finals)

    kernels = lambda **kw: mamba3_siso_kernels(**kw, chunk_size=64, config=config, interpret=True)  # noqa: E731
    (_, (out, finals)), grads = jax.jit(jax.value_and_grad(lambda kw, st: loss(kw, st, kernels), (0, 1), True))(
        jargs, jstates
    )
    check_against_oracle(out, finals, args, states)
    reference = lambda **kw: dispatch.reference.mamba3_siso(**kw, chunk_size=64)  # noqa: E731
    grad = jax.jit(jax.value_and_grad(lambda kw, st: loss(kw, st, reference), (0, 1), True))
    _, rounded_reference = grad(jargs, jstates)
    _, exact = grad(*as_float32(jargs, jstates))
    for name in ("V", "ADT", "DT", "Q", "K", "Angles"):
        want = (rounded_reference[0][name], exact[0][name])
        assert_gradient_close(f"d{name}", grads[0][name], *want, ANGLE_PATH.get(name, 1.0))
    assert_gradient_close("d input ssm state", grads[1][1], rounded_reference[1][1], exact[1][1])


def test_packed_sequences_each_run_as_alone(rng):
    """cu_seqlens with impl="pallas": each sequence from its own input states, as the oracle run on it alone."""
    args, states = rounded(*random_inputs(rng, 1, 90, 1, 2, 16, 16, 4, True, True, False))
    states = rounded(*random_inputs(rng, 3, 1, 1, 2, 16, 16, 4, False, False, True))[1]
    jargs, jstates = to_jax(args, states)
    bounds = (0, 1, 65, 90)
    out, *finals = mamba3_siso_combined(
        **jargs, Input_States=jstates, cu_seqlens=np.asarray(bounds), return_final_states=True, impl="pallas"
    )
    check_against_oracle(out, finals, args, states, bounds)


def test_float32_inputs_run_the_reference(rng):
    """The kernels' products are 16-bit: float32 V keeps the reference's float32 arithmetic under impl="pallas"."""
    args, _ = random_inputs(rng, 1, 5, 1, 2, 4, 8, 2, True, True, False)
    jargs = {k: None if v is None else jnp.asarray(v, jnp.float32) for k, v in args.items()}
    assert not dispatch.siso_on_kernels(jnp.float32) and dispatch.siso_on_kernels(BF16)
    got = mamba3_siso_combined(**jargs, impl="pallas")
    want, _ = naive_mamba3.mamba3_forward(**args)
    assert got.dtype == jnp.float32
    assert_close("out", got, want, jnp.float32)
