"""Chunked SSD reference (pallas_kernels.ssd) against the float64 NumPy oracle (forward, final state, every
gradient), against the selective-scan reference, packed sequences against separate runs, and argument checks."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import mamba_chunk_scan_combined, selective_scan_fn
from tests.pallas_kernels import naive
from tests.pallas_kernels.one_program import forward_and_backward

INF = float("inf")


def random_seq_idx(rng, batch, seqlen, max_seqs=4):
    """Non-decreasing sequence ids from 0 per row, with random cut points."""
    rows = []
    for _ in range(batch):
        cuts = np.sort(rng.choice(np.arange(1, seqlen), size=min(max_seqs - 1, seqlen - 1), replace=False))
        row = np.zeros(seqlen, np.int32)
        for c in cuts:
            row[c:] += 1
        rows.append(row)
    return np.stack(rows)


def make_inputs(
    rng, batch, seqlen, nheads, headdim, dstate, groups, dtype, *, D="H", z=True, init=True, seq=False, softplus=True
):
    raw_dt = (
        rng.normal(-1.0, 1.0, (batch, seqlen, nheads)) if softplus else rng.normal(0.1, 0.3, (batch, seqlen, nheads))
    )
    values = {
        "x": (rng.normal(size=(batch, seqlen, nheads, headdim)), dtype),
        "dt": (raw_dt, dtype),
        "A": (-np.exp(rng.uniform(-3.0, 1.0, nheads)), jnp.float32),
        "B": (rng.normal(size=(batch, seqlen, groups, dstate)), dtype),
        "C": (rng.normal(size=(batch, seqlen, groups, dstate)), dtype),
        "D": None if D is None else (rng.normal(size=(nheads,) if D == "H" else (nheads, headdim)), jnp.float32),
        "z": (rng.normal(size=(batch, seqlen, nheads, headdim)), dtype) if z else None,
        "dt_bias": (rng.uniform(-2.0, 0.0, nheads), jnp.float32) if softplus else None,
        "initial_states": (rng.normal(size=(batch, nheads, headdim, dstate)), jnp.float32) if init else None,
    }
    arrays = {k: None if v is None else jnp.asarray(v[0], v[1]) for k, v in values.items()}
    exact = {k: None if v is None else np.asarray(v.astype(jnp.float32), np.float64) for k, v in arrays.items()}
    seq_idx = random_seq_idx(rng, batch, seqlen) if seq and seqlen > 1 else None
    return arrays, exact, seq_idx


def keep_from_seq_idx(seq_idx, batch, seqlen):
    """keep_t = 0 where the sequence id changes (the position before 0 counts as sequence 0)."""
    if seq_idx is None:
        return np.ones((batch, seqlen))
    prev = np.concatenate([np.zeros((batch, 1), seq_idx.dtype), seq_idx[:, :-1]], axis=1)
    return (seq_idx == prev).astype(float)


def _scan_args(exact, seq_idx, softplus, dt_limit):
    """The SSD inputs as the per-channel recurrence of ``naive`` (dim = H * P channels), with pre-activation dt."""
    x = exact["x"]
    batch, seqlen, nheads, headdim = x.shape
    dstate = exact["B"].shape[-1]
    dim = nheads * headdim
    pre = exact["dt"] + (0.0 if exact["dt_bias"] is None else exact["dt_bias"])
    act = naive.softplus(pre) if softplus else pre
    dt = np.clip(act, *dt_limit)
    D = exact["D"]
    args = (
        x.reshape(batch, seqlen, dim),
        np.repeat(dt, headdim, axis=2),
        np.repeat(exact["A"], headdim)[:, None] * np.ones((1, dstate)),
        naive.expand_groups(exact["B"], dim),
        naive.expand_groups(exact["C"], dim),
        None if D is None else (np.repeat(D, headdim) if D.ndim == 1 else D.reshape(-1)),
        None if exact["z"] is None else exact["z"].reshape(batch, seqlen, dim),
        None if exact["initial_states"] is None else exact["initial_states"].reshape(batch, dim, dstate),
        keep_from_seq_idx(seq_idx, batch, seqlen),
    )
    return args, pre, act


def _forward(exact, args):
    """(out (batch, L, H, P), final_states (batch, H, P, N)) of the recurrence on ``_scan_args``'s ``args``."""
    batch, _, nheads, headdim = exact["x"].shape
    out, final, _ = naive.scan_forward(*args)
    return out.reshape(exact["x"].shape), final.reshape(batch, nheads, headdim, -1)


def oracle(exact, seq_idx, softplus, dt_limit, dout=None, dfinal=None):
    """(out, final_states, {input name: gradient} or None without ``dout``), float64."""
    if dout is None:
        return (*_forward(exact, _scan_args(exact, seq_idx, softplus, dt_limit)[0]), None)
    return oracle_with_spread(exact, seq_idx, softplus, dt_limit, dout, dfinal)[:3]


def oracle_with_spread(exact, seq_idx, softplus, dt_limit, dout, dfinal):
    """``oracle``'s (out, final_states, gradients), and the spread of the gradients that sum over batch and L (dA,
    d dt_bias: per head): the root-sum-square of the terms whose sum they are, per position or per position and head
    dim, whichever is larger. Those terms often cancel to a sum far smaller than themselves, while the rounding of
    each term (bf16 factors in the kernels) adds up like a random walk, to about that spread times the rounding; an
    error is then judged against max(|sum|, spread), not against the sum alone. A position's terms can cancel over
    its head dims too (N 256, bf16, TEST_SEED=209065923: dA 3.1% from the oracle relative to the per-position
    spread, with the Triton and the Mosaic GPU backward alike; 1.4% relative to the per-head-dim one)."""
    x = exact["x"]
    batch, seqlen, nheads, headdim = x.shape
    dim = nheads * headdim
    args, pre, act = _scan_args(exact, seq_idx, softplus, dt_limit)
    out, final = _forward(exact, args)
    g = naive.scan_backward(dout.reshape(batch, seqlen, dim), dfinal.reshape(batch, dim, -1), *args)
    inside = (act > dt_limit[0]) & (act < dt_limit[1])
    factor = inside * (naive.sigmoid(pre) if softplus else 1.0)  # d dt per d delta, (batch, L, H)
    per_dim = g.delta.reshape(batch, seqlen, nheads, headdim) * factor[..., None]
    ddt = per_dim.sum(-1)
    D = exact["D"]
    groups = exact["B"].shape[2]
    grads = {
        "x": g.u.reshape(x.shape),
        "dt": ddt,
        "A": g.A.reshape(nheads, -1).sum(axis=1),
        "B": naive.reduce_groups(g.B, groups),
        "C": naive.reduce_groups(g.C, groups),
        "D": None if D is None else g.D.reshape(nheads, headdim).sum(-1) if D.ndim == 1 else g.D.reshape(D.shape),
        "z": None if g.z is None else g.z.reshape(x.shape),
        "dt_bias": None if exact["dt_bias"] is None else ddt.sum(axis=(0, 1)),
        "initial_states": None if exact["initial_states"] is None else g.h0.reshape(final.shape),
    }
    spread = {"A": _spread(g.A_steps.reshape(batch, seqlen, nheads, headdim, -1).sum(-1))}
    if exact["dt_bias"] is not None:
        spread["dt_bias"] = _spread(per_dim)
    return out, final, grads, spread


def _spread(terms: np.ndarray) -> np.ndarray:
    """(batch, L, H, P) terms of per-head sums -> their root-sum-square per head, of the terms per position (summed
    over P) or per position and head dim, whichever is larger."""
    per_position = np.sqrt(np.sum(terms.sum(-1) ** 2, axis=(0, 1)))
    return np.maximum(per_position, np.sqrt(np.sum(terms**2, axis=(0, 1, 3))))


def run_with_vjp(arrays, seq_idx, chunk, softplus, dt_limit, dout, dfinal, *, impl="reference", config=None):
    """(out, final_states, {input name: gradient}) of ``mamba_chunk_scan_combined`` over the non-None ``arrays``,
    backpropagating (dout, dfinal), both compiled as one program."""
    names = [k for k, v in arrays.items() if v is not None]

    def run(*xs):
        return mamba_chunk_scan_combined(
            **dict(zip(names, xs, strict=True)),
            chunk_size=chunk,
            seq_idx=None if seq_idx is None else jnp.asarray(seq_idx),
            dt_softplus=softplus,
            dt_limit=dt_limit,
            return_final_states=True,
            impl=impl,
            config=config,
        )

    (out, final), grads = forward_and_backward(run, [arrays[k] for k in names], (dout, dfinal))
    return out, final, dict(zip(names, grads, strict=True))


CASES = [  # batch, L, H, P, N, G, chunk, dtype, D, z, init, seq_idx, softplus, dt_limit
    (2, 1, 4, 8, 16, 1, 16, jnp.float32, "H", True, True, False, True, (0.0, INF)),
    (1, 100, 4, 4, 8, 2, 32, jnp.float32, "HP", False, False, True, True, (0.0, INF)),
    (2, 256, 2, 8, 16, 1, 64, jnp.float32, None, True, True, True, True, (0.01, 0.3)),
    (1, 97, 6, 4, 4, 3, 16, jnp.bfloat16, "H", True, True, True, True, (0.0, INF)),
    (2, 64, 4, 4, 8, 4, 64, jnp.bfloat16, "HP", True, False, False, False, (0.0, INF)),
    (1, 1000, 2, 4, 8, 1, 128, jnp.float32, "H", True, True, True, True, (0.0, INF)),
    (3, 37, 4, 2, 4, 2, 256, jnp.float16, "H", False, True, False, True, (0.0, INF)),
]


@pytest.mark.parametrize("batch,seqlen,nheads,headdim,dstate,groups,chunk,dtype,D,z,init,seq,softplus,dt_limit", CASES)
def test_forward_and_gradients_match_oracle(
    rng, batch, seqlen, nheads, headdim, dstate, groups, chunk, dtype, D, z, init, seq, softplus, dt_limit
):
    arrays, exact, seq_idx = make_inputs(
        rng, batch, seqlen, nheads, headdim, dstate, groups, dtype, D=D, z=z, init=init, seq=seq, softplus=softplus
    )
    dout = jnp.asarray(rng.normal(size=(batch, seqlen, nheads, headdim)), dtype)
    dfinal = jnp.asarray(rng.normal(size=(batch, nheads, headdim, dstate)), jnp.float32)
    out, final, grads = run_with_vjp(arrays, seq_idx, chunk, softplus, dt_limit, dout, dfinal)
    want_out, want_final, want_grads = oracle(
        exact,
        seq_idx,
        softplus,
        dt_limit,
        np.asarray(dout.astype(jnp.float32), np.float64),
        np.asarray(dfinal, np.float64),
    )
    assert out.dtype == dtype and final.dtype == jnp.float32
    assert_close("out", out, want_out, dtype)
    assert_close("final_states", final, want_final, jnp.float32)
    for name, grad in grads.items():
        assert grad.dtype == arrays[name].dtype, name
        assert_close(f"d{name}", grad, want_grads[name], arrays[name].dtype)


@pytest.mark.parametrize("groups", [1, 2])
def test_equals_selective_scan_with_scalar_A_per_head(rng, groups):
    """SSD is the selective scan with A and dt shared by the P channels of a head (both in one compiled program)."""
    batch, seqlen, nheads, headdim, dstate = 2, 70, 4, 4, 8
    arrays, _, _ = make_inputs(rng, batch, seqlen, nheads, headdim, dstate, groups, jnp.float32, init=False)
    dim = nheads * headdim
    flat = lambda t: t.reshape(batch, seqlen, dim)  # noqa: E731

    @jax.jit
    def both(arrays):
        ssd = mamba_chunk_scan_combined(
            arrays["x"],
            arrays["dt"],
            arrays["A"],
            arrays["B"],
            arrays["C"],
            32,
            D=arrays["D"],
            z=arrays["z"],
            dt_bias=arrays["dt_bias"],
            dt_softplus=True,
            return_final_states=True,
        )
        scan = selective_scan_fn(
            flat(arrays["x"]),
            jnp.repeat(arrays["dt"], headdim, axis=2),
            jnp.repeat(arrays["A"], headdim)[:, None] * jnp.ones((1, dstate)),
            arrays["B"],
            arrays["C"],
            jnp.repeat(arrays["D"], headdim),
            flat(arrays["z"]),
            jnp.repeat(arrays["dt_bias"], headdim),
            True,
            True,
        )
        return ssd, scan

    (out, final), (want, want_last) = both(arrays)
    assert_close("out", flat(out), want, jnp.float32)
    assert_close("final_states", final.reshape(batch, dim, dstate), want_last, jnp.float32)


@pytest.mark.parametrize("chunk", [8, 16, 64])
def test_packed_sequences_equal_separate_runs(rng, chunk):
    """seq_idx: each packed sequence computes exactly what it computes alone; initial_states feeds sequence 0 only.
    The packed run and the separate ones are one compiled program."""
    lengths = [23, 40, 1, 17]
    seqlen = sum(lengths)
    arrays, _, _ = make_inputs(rng, 1, seqlen, 4, 4, 8, 2, jnp.float32)
    seq_idx = jnp.asarray(np.repeat(np.arange(len(lengths)), lengths)[None].astype(np.int32))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])

    @jax.jit
    def packed_and_alone(arrays):
        kw = dict(D=arrays["D"], dt_bias=arrays["dt_bias"], dt_softplus=True, return_final_states=True)
        x, dt, A, B, C, z = (arrays[k] for k in ("x", "dt", "A", "B", "C", "z"))
        packed = mamba_chunk_scan_combined(
            x, dt, A, B, C, chunk, z=z, initial_states=arrays["initial_states"], seq_idx=seq_idx, **kw
        )
        alone = []
        for i, (start, length) in enumerate(zip(starts, lengths, strict=True)):
            part = lambda t: t[:, start : start + length]  # noqa: E731, B023
            init = arrays["initial_states"] if i == 0 else None
            alone.append(
                mamba_chunk_scan_combined(
                    part(x), part(dt), A, part(B), part(C), chunk, z=part(z), initial_states=init, **kw
                )
            )
        return packed, alone

    (packed, final), alone = packed_and_alone(arrays)
    for i, (start, length, (out, _)) in enumerate(zip(starts, lengths, alone, strict=True)):
        assert_close(f"sequence {i}", packed[:, start : start + length], out, jnp.float32)
    assert_close("final state = last sequence's", final, alone[-1][1], jnp.float32)


def test_chunk_size_does_not_change_result(rng):
    """Chunks of 16, 64 and 256 over L 150 with packed sequences give the same result (one compiled program)."""
    arrays, _, seq_idx = make_inputs(rng, 2, 150, 4, 4, 8, 1, jnp.float32, seq=True)

    @jax.jit
    def by_chunk(arrays):
        return [
            mamba_chunk_scan_combined(
                **arrays, chunk_size=q, seq_idx=jnp.asarray(seq_idx), dt_softplus=True, return_final_states=True
            )
            for q in (16, 64, 256)
        ]

    outs = by_chunk(arrays)
    for out, final in outs[1:]:
        assert_close("out", out, outs[0][0], jnp.float32)
        assert_close("final", final, outs[0][1], jnp.float32)


def test_extreme_decay_stays_finite(rng):
    """Huge dt*|A| (log-decays of -1e4 inside a chunk): outputs and gradients finite, no exp of large positives."""
    arrays, _, _ = make_inputs(rng, 1, 128, 2, 4, 4, 1, jnp.float32)
    dt = jnp.full(arrays["dt"].shape, 60.0)
    A = jnp.asarray([-200.0, -1e-3])

    def loss(x, dt, A, B, C):
        return jnp.sum(mamba_chunk_scan_combined(x, dt, A, B, C, 128, dt_softplus=True) ** 2)

    value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)))
    value, grads = value_and_grad(arrays["x"], dt, A, arrays["B"], arrays["C"])
    assert np.isfinite(float(value))
    for g in grads:
        assert bool(jnp.all(jnp.isfinite(g)))


def _good(rng):
    arrays, _, _ = make_inputs(rng, 2, 6, 4, 2, 3, 2, jnp.float32)
    return {**arrays, "chunk_size": 4}


BAD = [
    ({"x": jnp.zeros((2, 6, 8))}, "x must have rank 4"),
    ({"chunk_size": 0}, "chunk_size must be a positive int"),
    ({"dt": jnp.zeros((2, 6, 3))}, "dt must have shape (batch, L, H)"),
    ({"A": jnp.zeros((4,), jnp.bfloat16)}, "A must be float32"),
    ({"A": jnp.zeros((3,))}, "A must have shape (H,)"),
    ({"B": jnp.zeros((2, 6, 3, 3))}, "B groups (G)=3 must be positive and divide H=4"),
    ({"C": jnp.zeros((2, 6, 2, 4))}, "C must have shape"),
    ({"D": jnp.zeros((4, 3))}, "D must have shape (H,)"),
    ({"z": jnp.zeros((2, 6, 4, 3))}, "z must have shape"),
    ({"dt_bias": jnp.zeros((2,))}, "dt_bias must have shape (H,)"),
    ({"initial_states": jnp.zeros((2, 4, 2, 4))}, "initial_states must have shape (batch, H, P, N)"),
    ({"seq_idx": jnp.zeros((2, 6), jnp.float32)}, "seq_idx must be an integer array"),
    ({"seq_idx": jnp.asarray([[0, 0, 1, 1, 0, 0]] * 2)}, "seq_idx must be non-decreasing"),
    ({"seq_idx": jnp.full((2, 6), -1)}, "seq_idx must be non-negative"),
    ({"dt_limit": (0.5, 0.1)}, "dt_limit must be a pair (min, max) with min <= max"),
]


@pytest.mark.parametrize("override,message", BAD)
def test_bad_arguments_name_the_argument(rng, override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mamba_chunk_scan_combined(**{**_good(rng), **override})


def test_unknown_impl_is_refused(rng):
    with pytest.raises(ValueError, match="impl must be one of"):
        mamba_chunk_scan_combined(**_good(rng), impl="triton")
