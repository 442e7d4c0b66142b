"""Mamba-3's MIMO reference (chunked, every rank at once) and its decoding step against the float64 oracle (a loop
over the recurrence, one rank-R update a step): outputs and final states on awkward shapes (L of 1 and not a
multiple of the chunk, ranks 1, 2 and 4, several groups, both rotary divisors, the ranks unsummed, no D or Z, input
states), every gradient against central differences of the oracle, a prefill continued by steps against a longer
prefill, packed sequences, and the argument checks."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import mamba3_mimo, mamba3_mimo_step
from tests.pallas_kernels import naive_mamba3
from tests.pallas_kernels.test_mamba3_reference import (
    TIME_FIRST,
    TIME_LAST,
    assert_angles_close,
    assert_gradients_match_the_oracle,
    random_inputs,
)

PROJECTIONS = ("MIMO_V", "MIMO_Z", "MIMO_Out")


def mimo_inputs(rng, batch, seqlen, rank, groups, heads, headdim, dstate, divisor, has_d, has_z, has_out, states):
    """SISO-like inputs (``random_inputs``) with Q, K per rank, biases per head and rank, the three projections."""
    pairs = dstate // divisor
    args, _ = random_inputs(rng, batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, False)
    args["Q"] = rng.normal(size=(batch, seqlen, rank, groups, dstate))
    args["K"] = rng.normal(size=(batch, seqlen, rank, groups, dstate))
    args["Q_bias"] = 1.0 + 0.1 * rng.normal(size=(heads, rank, dstate))
    args["K_bias"] = 1.0 + 0.1 * rng.normal(size=(heads, rank, dstate))
    args["MIMO_V"] = rng.normal(1.0 / rank, 0.2, size=(heads, rank, headdim))
    args["MIMO_Z"] = rng.normal(1.0, 0.2, size=(heads, rank, headdim))
    args["MIMO_Out"] = rng.normal(1.0 / rank, 0.2, size=(heads, rank, headdim)) if has_out else None
    initial = None
    if states:
        initial = (
            rng.uniform(0, 2 * np.pi, size=(batch, heads, pairs)),
            rng.normal(size=(batch, heads, headdim, dstate)),
            rng.normal(size=(batch, rank, heads, dstate)),
            rng.normal(size=(batch, heads, headdim)),
        )
    return args, initial


def as_jax(args: dict, states):
    to = lambda a: None if a is None else jnp.asarray(a, jnp.float32)  # noqa: E731
    return {k: to(v) for k, v in args.items()}, None if states is None else tuple(map(to, states))


CASES = [  # batch, L, R, groups, heads, headdim, N, divisor, chunk, D, Z, MIMO_Out, input states
    (1, 1, 4, 1, 1, 2, 8, 4, 4, True, True, True, False),
    (2, 9, 2, 1, 2, 3, 8, 2, 4, True, False, True, True),
    (1, 16, 4, 2, 4, 2, 8, 4, 8, False, True, False, True),
    (2, 13, 1, 1, 3, 4, 4, 2, 5, True, True, True, False),
    (1, 37, 4, 1, 2, 2, 16, 4, 16, True, True, True, True),
]


@pytest.mark.parametrize(
    "batch,seqlen,rank,groups,heads,headdim,dstate,divisor,chunk,has_d,has_z,has_out,states", CASES
)
def test_chunked_reference_matches_the_recurrence(
    rng, batch, seqlen, rank, groups, heads, headdim, dstate, divisor, chunk, has_d, has_z, has_out, states
):
    args, initial = mimo_inputs(
        rng, batch, seqlen, rank, groups, heads, headdim, dstate, divisor, has_d, has_z, has_out, states
    )
    want, want_finals = naive_mamba3.mamba3_mimo_forward(**args, states=initial)
    jargs, jstates = as_jax(args, initial)
    out, *finals = jax.jit(
        lambda a, s: mamba3_mimo(**a, chunk_size=chunk, rotary_dim_divisor=divisor, return_state=True, Input_States=s)
    )(jargs, jstates)
    assert_close("out", out, want, jnp.float32)
    assert_angles_close("final angle", finals[0], want_finals[0])
    for name, got, expected in zip(("ssm", "k", "v"), finals[1:], want_finals[1:], strict=True):
        assert_close(f"final {name}", got, expected, jnp.float32)


def test_every_gradient_matches_central_differences_of_the_recurrence(rng):
    args, states = mimo_inputs(rng, 1, 5, 2, 1, 2, 2, 4, 2, True, True, True, True)

    def ours(**kw):
        out, _, ssm, _, _ = mamba3_mimo(**kw, chunk_size=2, rotary_dim_divisor=2, return_state=True)
        return out, ssm

    assert_gradients_match_the_oracle(rng, ours, naive_mamba3.mamba3_mimo_forward, args, states)


def steps_of(args: dict, t: int) -> dict:
    """Step t's arguments of a sequence's (Q, K, V, Z, Angles at axis 1; ADT, DT, Trap at axis 2)."""
    return {
        k: None if v is None else (v[:, t] if k in TIME_FIRST else v[..., t] if k in TIME_LAST else v)
        for k, v in args.items()
    }


@pytest.mark.parametrize("has_out", [True, False])
def test_a_prefill_continued_by_steps_is_a_longer_prefill(rng, has_out):
    args, _ = mimo_inputs(rng, 2, 11, 2, 1, 2, 3, 8, 4, True, True, has_out, False)
    jargs, _ = as_jax(args, None)
    whole, *whole_finals = mamba3_mimo(**jargs, chunk_size=4, return_state=True)
    prefill = {
        k: None if v is None else (v[:, :7] if k in TIME_FIRST else v[..., :7] if k in TIME_LAST else v)
        for k, v in jargs.items()
    }
    out, *states = mamba3_mimo(**prefill, chunk_size=4, return_state=True)
    outs = [out]
    step = jax.jit(lambda a, s: mamba3_mimo_step(**a, Input_States=s))
    for t in range(7, 11):
        y, states = step(steps_of(jargs, t), tuple(states))
        outs.append(y[:, None])
    assert_close("out", jnp.concatenate(outs, axis=1), whole, jnp.float32)
    assert_angles_close("final angle", states[0], whole_finals[0])
    for name, got, expected in zip(("ssm", "k", "v"), states[1:], whole_finals[1:], strict=True):
        assert_close(f"final {name}", got, expected, jnp.float32)


def test_packed_sequences_match_the_recurrence(rng):
    """cu_seqlens: each sequence against the float64 loop from its own input states; its final v is its own last."""
    lengths = (1, 12, 6)
    args, _ = mimo_inputs(rng, 1, sum(lengths), 2, 1, 2, 2, 8, 4, True, True, True, False)
    states = mimo_inputs(rng, len(lengths), 1, 2, 1, 2, 2, 8, 4, False, False, True, True)[1]
    bounds = np.cumsum((0, *lengths))
    jargs, jstates = as_jax(args, states)
    out, *finals = mamba3_mimo(**jargs, chunk_size=4, return_state=True, cu_seqlens=bounds, Input_States=jstates)
    for i, (start, end) in enumerate(itertools.pairwise(bounds)):
        own = tuple(s[i : i + 1] for s in states)
        part = {
            k: None
            if v is None
            else (v[:, start:end] if k in TIME_FIRST else v[..., start:end] if k in TIME_LAST else v)
            for k, v in args.items()
        }
        want, want_finals = naive_mamba3.mamba3_mimo_forward(**part, states=own)
        assert_close(f"out of sequence {i}", out[:, start:end], want, jnp.float32)
        for name, got, expected in zip(("ssm", "k", "v"), finals[1:], want_finals[1:], strict=True):
            assert_close(f"final {name} of sequence {i}", got[i : i + 1], expected, jnp.float32)


def test_bad_arguments_are_named_before_any_work(rng):
    args, _ = mimo_inputs(rng, 1, 4, 2, 1, 2, 2, 8, 4, False, False, True, False)
    jargs, _ = as_jax(args, None)
    with pytest.raises(ValueError, match=r"Q must have shape \(batch, L, R, G, N\)"):
        mamba3_mimo(**(jargs | {"Q": jnp.zeros((1, 3, 2, 1, 8))}))
    with pytest.raises(ValueError, match=r"MIMO_V must have shape \(H, R, P\) = \(2, 2, 2\)"):
        mamba3_mimo(**(jargs | {"MIMO_V": jnp.zeros((2, 3, 2))}))
    with pytest.raises(ValueError, match=r"K_bias must have shape \(H, R, N\) = \(2, 2, 8\)"):
        mamba3_mimo(**(jargs | {"K_bias": jnp.zeros((2, 3, 8))}))
    with pytest.raises(ValueError, match=r"rotary_dim_divisor must be 2 or 4 .* got 3"):
        mamba3_mimo(**jargs, rotary_dim_divisor=3)
    with pytest.raises(
        ValueError, match=r"Angles must have shape \(batch, L, H, N / rotary_dim_divisor\) = \(1, 4, 2, 4\)"
    ):
        mamba3_mimo(**jargs, rotary_dim_divisor=2)
    with pytest.raises(ValueError, match=r"Input_States k must have shape \(batch, R, H, N\) = \(1, 2, 2, 8\)"):
        bad = (jnp.zeros((1, 2, 2)), jnp.zeros((1, 2, 2, 8)), jnp.zeros((1, 1, 2, 8)), jnp.zeros((1, 2, 2)))
        mamba3_mimo(**jargs, Input_States=bad)
    step = steps_of(jargs, 0)
    with pytest.raises(ValueError, match=r"Trap must have shape \(batch, H\) = \(1, 2\)"):
        mamba3_mimo_step(**(step | {"Trap": jnp.zeros((1, 3))}))
