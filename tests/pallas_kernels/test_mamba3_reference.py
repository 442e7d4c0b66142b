"""Mamba-3's SISO reference (chunked) and its decoding step against the float64 oracle (a loop over the recurrence):
outputs and final states over awkward shapes (L of 1 and not a multiple of the chunk, chunks that are no power of
two, several groups, partial rotation, input states), every gradient against central differences of the oracle, a
prefill continued by steps against a longer prefill, and the argument checks."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels.mamba3.api import mamba3_siso_combined, mamba3_siso_step
from tests.pallas_kernels import naive_mamba3
from tests.pallas_kernels.naive import numeric_grad


def random_inputs(rng, batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states):
    """Inputs in the ranges the module produces: A dt < 0 from softplus, dt from softplus, logits of order 1."""
    softplus = lambda x: np.logaddexp(x, 0.0)  # noqa: E731
    dt = softplus(rng.normal(size=(batch, heads, seqlen)) - 1.0)
    A = -softplus(rng.normal(size=(batch, heads, seqlen))) - 1e-4
    args = {
        "Q": rng.normal(size=(batch, seqlen, groups, dstate)),
        "K": rng.normal(size=(batch, seqlen, groups, dstate)),
        "V": rng.normal(size=(batch, seqlen, heads, headdim)),
        "ADT": A * dt,
        "DT": dt,
        "Trap": rng.normal(size=(batch, heads, seqlen)),
        "Q_bias": 1.0 + 0.1 * rng.normal(size=(heads, dstate)),
        "K_bias": 1.0 + 0.1 * rng.normal(size=(heads, dstate)),
        "Angles": rng.normal(size=(batch, seqlen, heads, pairs)),
        "D": rng.normal(size=heads) if has_d else None,
        "Z": rng.normal(size=(batch, seqlen, heads, headdim)) if has_z else None,
    }
    states = None
    if has_states:
        states = (
            rng.uniform(0, 2 * np.pi, size=(batch, heads, pairs)),
            rng.normal(size=(batch, heads, headdim, dstate)),
            rng.normal(size=(batch, heads, dstate)),
            rng.normal(size=(batch, heads, headdim)),
        )
    return args, states


def as_jax(args: dict, states):
    to = lambda a: None if a is None else jnp.asarray(a, jnp.float32)  # noqa: E731
    return {k: to(v) for k, v in args.items()}, None if states is None else tuple(map(to, states))


def assert_angles_close(name, actual, expected):
    """Angles modulo 2 pi: compared through their cosines and sines (0 and 2 pi are one angle)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert_close(f"{name} cos", np.cos(actual), np.cos(expected), jnp.float32)
    assert_close(f"{name} sin", np.sin(actual), np.sin(expected), jnp.float32)


CASES = [  # batch, L, groups, heads, headdim, N, S, chunk, D, Z, input states
    (1, 1, 1, 1, 2, 4, 1, 4, True, True, False),
    (2, 9, 1, 2, 3, 6, 2, 4, True, False, True),
    (1, 16, 2, 4, 2, 8, 4, 8, False, True, True),
    (2, 13, 1, 3, 4, 4, 1, 5, True, True, False),
    (1, 70, 1, 2, 2, 4, 2, 64, True, True, True),
]


@pytest.mark.parametrize("batch,seqlen,groups,heads,headdim,dstate,pairs,chunk,has_d,has_z,has_states", CASES)
def test_chunked_reference_matches_the_recurrence(
    rng, batch, seqlen, groups, heads, headdim, dstate, pairs, chunk, has_d, has_z, has_states
):
    args, states = random_inputs(rng, batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states)
    want, want_finals = naive_mamba3.mamba3_forward(**args, states=states)
    jargs, jstates = as_jax(args, states)
    run = jax.jit(
        lambda kw, states: mamba3_siso_combined(**kw, Input_States=states, chunk_size=chunk, return_final_states=True)
    )
    out, *finals = run(jargs, jstates)
    assert out.dtype == jnp.float32 and out.shape == want.shape
    assert_close("out", out, want, jnp.float32)
    assert_angles_close("final angle", finals[0], want_finals[0])
    for name, got, expected in zip(("ssm", "k", "v"), finals[1:], want_finals[1:], strict=True):
        assert_close(f"final {name}", got, expected, jnp.float32)


def test_every_gradient_matches_central_differences_of_the_recurrence(rng):
    args, states = random_inputs(rng, 1, 6, 1, 2, 2, 4, 1, True, True, True)

    def ours(**kw):
        out, _, ssm, _, _ = mamba3_siso_combined(**kw, chunk_size=4, return_final_states=True)
        return out, ssm

    assert_gradients_match_the_oracle(rng, ours, naive_mamba3.mamba3_forward, args, states)


def assert_gradients_match_the_oracle(rng, ours, oracle_forward, args: dict, states) -> None:
    """d/d every input (and the input states) of sum(out * dout) + sum(final ssm * dssm): the JAX reference's
    autodiff (``ours(**args, Input_States=...)`` -> (out, final ssm)) against central differences of the float64
    oracle (``oracle_forward(**args, states=...)`` -> (out, finals))."""
    names = [k for k, v in args.items() if v is not None]
    dout = rng.normal(size=oracle_forward(**args, states=states)[0].shape)
    dssm = rng.normal(size=states[1].shape)

    def oracle(values, state_values):
        out, finals = oracle_forward(**dict(zip(names, values, strict=True)), states=state_values)
        return np.sum(out * dout) + np.sum(finals[1] * dssm)

    def loss(values, state_values):
        out, ssm = ours(**dict(zip(names, values, strict=True)), Input_States=state_values)
        return jnp.sum(out * dout) + jnp.sum(ssm * dssm)

    values = [np.array(args[k], np.float64) for k in names]
    state_values = [np.array(s, np.float64) for s in states]
    grads, state_grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(
        [jnp.asarray(v, jnp.float32) for v in values], tuple(jnp.asarray(s, jnp.float32) for s in state_values)
    )
    for i, name in enumerate(names):
        want = numeric_grad(lambda x, i=i: oracle([*values[:i], x, *values[i + 1 :]], state_values), values[i], 1.0)
        assert_close(f"d{name}", grads[i], want, jnp.float32)
    for i, name in enumerate(("angle", "ssm", "k", "v")):
        want = numeric_grad(
            lambda x, i=i: oracle(values, [*state_values[:i], x, *state_values[i + 1 :]]), state_values[i], 1.0
        )
        assert_close(f"d input {name} state", state_grads[i], want, jnp.float32)


TIME_FIRST = ("Q", "K", "V", "Z", "Angles")  # (batch, L, ...)
TIME_LAST = ("ADT", "DT", "Trap")  # (batch, H, L)
PER_HEAD = ("Q_bias", "K_bias", "D")


def steps_of(args: dict, times) -> dict:
    """The inputs at ``times`` (a slice: a shorter sequence; an int: one step's inputs)."""
    return (
        {k: args[k][:, times] for k in TIME_FIRST}
        | {k: args[k][..., times] for k in TIME_LAST}
        | {k: args[k] for k in PER_HEAD}
    )


def test_a_prefill_continued_by_steps_is_a_longer_prefill(rng):
    """Prefill 7 steps, then 3 decoding steps from its final states: the outputs and states of one prefill of 10."""
    args, _ = random_inputs(rng, 2, 10, 2, 4, 3, 8, 3, True, True, False)
    jargs, _ = as_jax(args, None)
    prefill = jax.jit(lambda **kw: mamba3_siso_combined(**kw, chunk_size=4, return_final_states=True))
    whole, *whole_finals = prefill(**jargs)
    out, *states = prefill(**steps_of(jargs, slice(0, 7)))
    assert_close("prefill", out, whole[:, :7], jnp.float32)
    step = jax.jit(mamba3_siso_step)
    for t in range(7, 10):
        out_t, states = step(**steps_of(jargs, t), Input_States=tuple(states))
        assert_close(f"step {t}", out_t, whole[:, t], jnp.float32)
    assert_angles_close("angle", states[0], whole_finals[0])
    for name, got, want in zip(("ssm", "k", "v"), states[1:], whole_finals[1:], strict=True):
        assert_close(f"state {name}", got, want, jnp.float32)


def test_a_first_step_without_states_starts_from_zeros(rng):
    args, _ = random_inputs(rng, 2, 1, 1, 2, 2, 4, 2, True, True, False)
    want, want_finals = naive_mamba3.mamba3_forward(**args)
    jargs, _ = as_jax(args, None)
    out, states = mamba3_siso_step(**steps_of(jargs, 0))
    assert_close("out", out, want[:, 0], jnp.float32)
    assert_close("ssm", states[1], want_finals[1], jnp.float32)


def test_bad_arguments_are_named_before_any_work(rng):
    args, _ = random_inputs(rng, 1, 4, 1, 2, 2, 4, 2, False, False, False)
    jargs, _ = as_jax(args, None)
    with pytest.raises(ValueError, match=r"K must have shape like Q"):
        mamba3_siso_combined(**(jargs | {"K": jargs["K"][:, :3]}))
    with pytest.raises(ValueError, match=r"ngroups \(Q.shape\[-2\]\)=3 must be positive and divide nheads"):
        mamba3_siso_combined(**(jargs | {"Q": jnp.zeros((1, 4, 3, 4)), "K": jnp.zeros((1, 4, 3, 4))}))
    with pytest.raises(ValueError, match=r"Angles must have shape \(batch, L, H, S\) .* 1 <= S <= N / 2 = 2"):
        mamba3_siso_combined(**(jargs | {"Angles": jnp.zeros((1, 4, 2, 3))}))
    with pytest.raises(ValueError, match=r"DT must have shape \(batch, H, L\) = \(1, 2, 4\)"):
        mamba3_siso_combined(**(jargs | {"DT": jnp.zeros((1, 4, 2))}))
    with pytest.raises(ValueError, match=r"Input_States ssm must have shape \(batch, H, P, N\)"):
        bad = (jnp.zeros((1, 2, 2)), jnp.zeros((1, 2, 4, 2)), jnp.zeros((1, 2, 4)), jnp.zeros((1, 2, 2)))
        mamba3_siso_combined(**jargs, Input_States=bad)
    with pytest.raises(ValueError, match=r"chunk_size must be a positive int, got 0"):
        mamba3_siso_combined(**jargs, chunk_size=0)
    with pytest.raises(ValueError, match=r"cu_seqlens must increase strictly from 0 to L=4 .* got \[0, 3\]"):
        mamba3_siso_combined(**jargs, cu_seqlens=np.asarray([0, 3], np.int32))
    with pytest.raises(ValueError, match=r"cu_seqlens must be concrete"):
        jax.jit(lambda cu: mamba3_siso_combined(**jargs, cu_seqlens=cu))(jnp.asarray([0, 4], jnp.int32))
    with pytest.raises(ValueError, match=r"Input_States angle must have shape \(num_sequences, H, S\) = \(2, 2, 2\)"):
        bad = (jnp.zeros((1, 2, 2)), jnp.zeros((1, 2, 2, 4)), jnp.zeros((1, 2, 4)), jnp.zeros((1, 2, 2)))
        mamba3_siso_combined(**jargs, Input_States=bad, cu_seqlens=np.asarray([0, 1, 4]))
    two = {k: None if v is None else jnp.concatenate([v, v]) for k, v in jargs.items() if k not in PER_HEAD}
    with pytest.raises(ValueError, match=r"cu_seqlens needs batch 1 \(sequences packed along L\), got batch 2"):
        mamba3_siso_combined(**(jargs | two), cu_seqlens=np.asarray([0, 4]))
    step = {k: jargs[k][:, 0] for k in ("Q", "K", "V", "Angles")} | {k: jargs[k][..., 0] for k in ("ADT", "DT")}
    with pytest.raises(ValueError, match=r"Trap must have shape \(batch, H\) = \(1, 2\)"):
        mamba3_siso_step(**step, Trap=jnp.zeros((1, 3)), Q_bias=jargs["Q_bias"], K_bias=jargs["K_bias"])


@pytest.mark.parametrize(
    "lengths,groups,chunk,has_states",
    [((1, 70, 13), 2, 8, True), ((9,), 1, 4, False), ((3, 1, 1, 6), 1, 64, True)],
    ids=["three-awkward-states", "one", "short-ones"],
)
def test_packed_sequences_match_the_recurrence_and_separate_runs(rng, lengths, groups, chunk, has_states):
    """cu_seqlens: each packed sequence against the float64 loop from its own input states (outputs and final
    states), and every gradient against the same sequences run one by one."""
    seqlen, heads, pairs = sum(lengths), 2 * groups, 2
    args, _ = random_inputs(rng, 1, seqlen, groups, heads, 3, 6, pairs, True, True, False)
    states = (
        random_inputs(rng, len(lengths), 1, groups, heads, 3, 6, pairs, False, False, True)[1] if has_states else None
    )
    bounds = np.cumsum((0, *lengths))
    jargs, jstates = as_jax(args, states)

    def packed(values, state_values):
        return mamba3_siso_combined(
            **values, Input_States=state_values, chunk_size=chunk, return_final_states=True, cu_seqlens=bounds
        )

    out, *finals = jax.jit(packed)(jargs, jstates)
    for i, (start, end) in enumerate(itertools.pairwise(bounds)):
        own = None if states is None else tuple(s[i : i + 1] for s in states)
        want, want_finals = naive_mamba3.mamba3_forward(**_steps(args, start, end), states=own)
        assert_close(f"out of sequence {i}", out[:, start:end], want, jnp.float32)
        assert_angles_close(f"final angle of sequence {i}", finals[0][i : i + 1], want_finals[0])
        for name, got, expected in zip(("ssm", "k", "v"), finals[1:], want_finals[1:], strict=True):
            assert_close(f"final {name} of sequence {i}", got[i : i + 1], expected, jnp.float32)

    dout = jnp.asarray(rng.normal(size=out.shape), jnp.float32)
    dssm = jnp.asarray(rng.normal(size=finals[1].shape), jnp.float32)

    def separate(values, state_values):
        outs, ssms = [], []
        for i, (start, end) in enumerate(itertools.pairwise(bounds)):
            own = None if state_values is None else tuple(s[i : i + 1] for s in state_values)
            o, _, ssm, _, _ = mamba3_siso_combined(
                **_steps(values, start, end), Input_States=own, chunk_size=chunk, return_final_states=True
            )
            outs.append(o)
            ssms.append(ssm)
        return jnp.concatenate(outs, axis=1), jnp.concatenate(ssms)

    def loss(run, values, state_values):
        if run is packed:
            o, _, ssm, _, _ = packed(values, state_values)
        else:
            o, ssm = separate(values, state_values)
        return jnp.sum(o * dout) + jnp.sum(ssm * dssm)

    got = jax.jit(jax.grad(lambda v, s: loss(packed, v, s), argnums=(0, 1)))(jargs, jstates)
    want = jax.jit(jax.grad(lambda v, s: loss(separate, v, s), argnums=(0, 1)))(jargs, jstates)
    for path, g in jax.tree_util.tree_leaves_with_path(got):
        assert_close(f"d{jax.tree_util.keystr(path)}", g, _at(want, path), jnp.float32)


def _steps(args: dict, start: int, end: int) -> dict:
    """Steps start to end - 1 of every per-step input."""
    cut = {k: v[:, start:end] for k, v in args.items() if k in TIME_FIRST and v is not None}
    return args | cut | {k: args[k][..., start:end] for k in TIME_LAST}


def _at(tree, path):
    for key in path:
        tree = tree[key.key if hasattr(key, "key") else key.idx]
    return tree
