"""Selective-scan reference (pallas_kernels.selective_scan) against the float64 NumPy oracle: forward, last state
and every input gradient, over awkward shapes, both layouts, and argument checks."""

import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import selective_scan_fn
from pallas_kernels.selective_scan import reference
from tests.pallas_kernels import naive
from tests.pallas_kernels.one_program import forward_and_backward


def make_inputs(rng, batch, seqlen, dim, dstate, groups, dtype, *, D=True, z=True, bias=True, softplus=True):
    """Random inputs: activations in ``dtype``; A, D, delta_bias float32 (as the models hold them).

    Returns (jax kwargs, float64 copies of exactly those values)."""
    raw_delta = (
        rng.normal(-1.0, 0.7, (batch, seqlen, dim)) if softplus else np.abs(rng.normal(0, 0.4, (batch, seqlen, dim)))
    )
    values = {
        "u": (rng.normal(size=(batch, seqlen, dim)), dtype),
        "delta": (raw_delta, dtype),
        "A": (-np.exp(rng.uniform(-4.0, 1.0, (dim, dstate))), jnp.float32),
        "B": (rng.normal(size=(batch, seqlen, groups, dstate)), dtype),
        "C": (rng.normal(size=(batch, seqlen, groups, dstate)), dtype),
        "D": (rng.normal(size=dim), jnp.float32) if D else None,
        "z": (rng.normal(size=(batch, seqlen, dim)), dtype) if z else None,
        "delta_bias": (rng.uniform(-2.0, 0.5, dim), jnp.float32) if bias else None,
    }
    arrays = {k: None if v is None else jnp.asarray(v[0], v[1]) for k, v in values.items()}
    exact = {k: None if v is None else np.asarray(v.astype(jnp.float32), np.float64) for k, v in arrays.items()}
    return arrays, exact


def oracle(exact, softplus, dout=None, dlast=None):
    """Forward (out, last) and, given cotangents, the gradients of every input, from the NumPy adjoint."""
    dim = exact["u"].shape[-1]
    pre = exact["delta"] + (0.0 if exact["delta_bias"] is None else exact["delta_bias"])
    delta = naive.softplus(pre) if softplus else pre
    args = (exact["u"], delta, exact["A"], naive.expand_groups(exact["B"], dim), naive.expand_groups(exact["C"], dim))
    out, last, _ = naive.scan_forward(*args, exact["D"], exact["z"])
    if dout is None:
        return out, last, None
    g = naive.scan_backward(dout, dlast, *args, exact["D"], exact["z"])
    ddelta = g.delta * naive.sigmoid(pre) if softplus else g.delta
    groups = exact["B"].shape[2]
    grads = {
        "u": g.u,
        "delta": ddelta,
        "A": g.A,
        "B": naive.reduce_groups(g.B, groups),
        "C": naive.reduce_groups(g.C, groups),
        "D": g.D,
        "z": g.z,
        "delta_bias": None if exact["delta_bias"] is None else ddelta.sum(axis=(0, 1)),
    }
    return out, last, grads


CASES = [  # batch, L, dim, N, G, dtype, D, z, delta_bias, softplus
    (2, 1, 8, 4, 1, jnp.float32, True, True, True, True),
    (1, 7, 6, 1, 2, jnp.float32, False, False, False, False),
    (2, 64, 8, 16, 2, jnp.float32, True, False, True, True),
    (2, 129, 4, 4, 1, jnp.float32, False, True, False, False),
    (3, 33, 12, 16, 3, jnp.bfloat16, True, True, True, True),
    (1, 129, 8, 16, 1, jnp.bfloat16, True, True, False, True),
    (2, 7, 8, 4, 4, jnp.float16, True, True, True, True),
]


def assert_matches_oracle(rng, arrays: dict, exact: dict, softplus: bool, **scan_kwargs):
    """``selective_scan_fn(**arrays, **scan_kwargs)``, forward and backward on fresh random cotangents, against the
    oracle: out, last state and every input gradient (dtypes, shapes, values). Returns (out, last)."""
    names = [k for k, v in arrays.items() if v is not None]

    def run(*xs):
        kw = dict(zip(names, xs, strict=True))
        return selective_scan_fn(**kw, delta_softplus=softplus, return_last_state=True, **scan_kwargs)

    primals = [arrays[k] for k in names]
    out, last = jax.eval_shape(run, *primals)
    dout = jnp.asarray(rng.normal(size=out.shape), out.dtype)
    dlast = jnp.asarray(rng.normal(size=last.shape), jnp.float32)
    (out, last), grads = forward_and_backward(run, primals, (dout, dlast))
    grads = dict(zip(names, grads, strict=True))
    want_out, want_last, want_grads = oracle(
        exact, softplus, np.asarray(dout.astype(jnp.float32), np.float64), np.asarray(dlast, np.float64)
    )
    assert out.dtype == arrays["u"].dtype and last.dtype == jnp.float32
    assert_close("out", out, want_out, out.dtype)
    assert_close("last_state", last, want_last, jnp.float32)
    for name in names:
        assert grads[name].dtype == arrays[name].dtype and grads[name].shape == arrays[name].shape, name
        assert_close(f"d{name}", grads[name], want_grads[name], arrays[name].dtype)
    return out, last


def packed_seq_idx(rng, batch: int, seqlen: int) -> np.ndarray:
    """(batch, L) int32 sequence ids, each row its own random bounds: sequences of length 1 and longer."""
    rows = []
    for _ in range(batch):
        starts = np.sort(rng.choice(np.arange(1, seqlen), size=min(3, seqlen - 1), replace=False)) if seqlen > 1 else []
        row = np.zeros(seqlen, np.int32)
        for start in starts:
            row[start:] += 1
        rows.append(row)
    return np.stack(rows)


def assert_packed_matches_separate_runs(rng, arrays: dict, exact: dict, softplus: bool, **scan_kwargs):
    """``selective_scan_fn(..., seq_idx=...)`` with several packed sequences a row, forward and every gradient on
    fresh cotangents, against the float64 oracle run on each sequence alone from a zero state: out per step, the last
    state (the last sequence's), dA, dD and d delta_bias summed over every sequence."""
    batch, seqlen, _ = arrays["u"].shape
    seq_idx = packed_seq_idx(rng, batch, seqlen)
    names = [k for k, v in arrays.items() if v is not None]

    def run(*xs):
        kw = dict(zip(names, xs, strict=True))
        return selective_scan_fn(
            **kw, delta_softplus=softplus, return_last_state=True, seq_idx=jnp.asarray(seq_idx), **scan_kwargs
        )

    out_shape, last_shape = jax.eval_shape(run, *[arrays[k] for k in names])
    dout = jnp.asarray(rng.normal(size=out_shape.shape), out_shape.dtype)
    dlast = jnp.asarray(rng.normal(size=last_shape.shape), jnp.float32)
    (out, last), grads = forward_and_backward(run, [arrays[k] for k in names], (dout, dlast))
    grads = dict(zip(names, grads, strict=True))
    dout64, dlast64 = np.asarray(dout.astype(jnp.float32), np.float64), np.asarray(dlast, np.float64)
    want_out = np.zeros(out.shape)
    want = {k: np.zeros(arrays[k].shape) for k in names}
    shared = ("A", "D", "delta_bias")
    for b in range(batch):
        bounds = np.flatnonzero(np.diff(seq_idx[b], prepend=-1, append=-1))
        for start, end in itertools.pairwise(bounds):
            piece = {k: v if v is None or k in shared else v[b : b + 1, start:end] for k, v in exact.items()}
            final = dlast64[b : b + 1] if end == seqlen else np.zeros_like(dlast64[b : b + 1])
            part_out, part_last, part = oracle(piece, softplus, dout64[b : b + 1, start:end], final)
            want_out[b, start:end] = part_out[0]
            if end == seqlen:
                assert_close(f"last_state of row {b}", last[b], part_last[0], jnp.float32)
            for k in names:
                if k in shared:
                    want[k] = want[k] + part[k]
                else:
                    want[k][b, start:end] = part[k][0]
    assert_close("out", out, want_out, out.dtype)
    for k in names:
        assert_close(f"d{k}", grads[k], want[k], arrays[k].dtype)


@pytest.mark.parametrize(
    "batch,seqlen,dim,dstate,groups,dtype", [(2, 23, 8, 4, 2, jnp.float32), (1, 2, 4, 1, 1, jnp.bfloat16)]
)
def test_packed_sequences_run_as_if_alone(rng, batch, seqlen, dim, dstate, groups, dtype):
    arrays, exact = make_inputs(rng, batch, seqlen, dim, dstate, groups, dtype)
    assert_packed_matches_separate_runs(rng, arrays, exact, True, impl="reference")


@pytest.mark.parametrize("batch,seqlen,dim,dstate,groups,dtype,has_D,has_z,has_bias,softplus", CASES)
def test_forward_and_gradients_match_oracle(
    rng, batch, seqlen, dim, dstate, groups, dtype, has_D, has_z, has_bias, softplus
):
    arrays, exact = make_inputs(
        rng, batch, seqlen, dim, dstate, groups, dtype, D=has_D, z=has_z, bias=has_bias, softplus=softplus
    )
    assert_matches_oracle(rng, arrays, exact, softplus)


@pytest.mark.parametrize("chunk_len", [1, 5, 16])
def test_chunking_does_not_change_result(rng, chunk_len):
    arrays, exact = make_inputs(rng, 2, 50, 8, 4, 2, jnp.float32)
    A, B, C, D, z, bias = (arrays[k] for k in ("A", "B", "C", "D", "z", "delta_bias"))
    out, last = reference.selective_scan(arrays["u"], arrays["delta"], A, B, C, D, z, bias, True, chunk_len=chunk_len)
    want_out, want_last, _ = oracle(exact, True)
    assert_close("out", out, want_out, jnp.float32)
    assert_close("last_state", last, want_last, jnp.float32)


def test_channels_first_layout_matches_mamba_ssm_shapes(rng):
    """(batch, dim, L) with B/C as (batch, G, N, L) or (batch, N, L), as mamba-ssm's selective_scan_fn takes them."""
    arrays, exact = make_inputs(rng, 2, 19, 8, 4, 1, jnp.float32)
    to_cf = lambda t: jnp.swapaxes(t, 1, 2)  # noqa: E731
    b4 = jnp.transpose(arrays["B"], (0, 2, 3, 1))  # (batch, G, N, L)
    c3 = jnp.transpose(arrays["C"][:, :, 0], (0, 2, 1))  # (batch, N, L)
    out, last = selective_scan_fn(
        to_cf(arrays["u"]),
        to_cf(arrays["delta"]),
        arrays["A"],
        b4,
        c3,
        arrays["D"],
        to_cf(arrays["z"]),
        arrays["delta_bias"],
        True,
        True,
        layout="channels_first",
    )
    want_out, want_last, _ = oracle(exact, True)
    assert out.shape == (2, 8, 19)
    assert_close("out", jnp.swapaxes(out, 1, 2), want_out, jnp.float32)
    assert_close("last_state", last, want_last, jnp.float32)


def test_time_invariant_B_with_input_dependent_C(rng):
    """B of shape (dim, N) (an S4-style fixed B) mixed with a grouped, input-dependent C."""
    arrays, exact = make_inputs(rng, 2, 11, 6, 3, 2, jnp.float32, z=False)
    b_fixed = rng.normal(size=(6, 3))
    out = selective_scan_fn(
        arrays["u"],
        arrays["delta"],
        arrays["A"],
        jnp.asarray(b_fixed, jnp.float32),
        arrays["C"],
        arrays["D"],
        None,
        arrays["delta_bias"],
        True,
    )
    delta = naive.softplus(exact["delta"] + exact["delta_bias"])
    b_full = np.broadcast_to(b_fixed, (2, 11, 6, 3))
    want, _, _ = naive.scan_forward(
        exact["u"], delta, exact["A"], b_full, naive.expand_groups(exact["C"], 6), exact["D"]
    )
    assert_close("out", out, want, jnp.float32)


def test_jit_and_grad_are_finite_on_long_sequences(rng):
    arrays, _ = make_inputs(rng, 1, 300, 4, 16, 1, jnp.bfloat16)
    loss = jax.jit(
        jax.grad(
            lambda u: jnp.sum(
                selective_scan_fn(
                    u, *[arrays[k] for k in ("delta", "A", "B", "C", "D", "z", "delta_bias")], True
                ).astype(jnp.float32)
                ** 2
            )
        )
    )
    assert bool(jnp.all(jnp.isfinite(loss(arrays["u"]).astype(jnp.float32))))


def _good(rng):
    arrays, _ = make_inputs(rng, 2, 5, 4, 3, 2, jnp.float32)
    return arrays


BAD = [  # (override, expected message fragment)
    ({"u": jnp.zeros((2, 5))}, "u must have rank 3"),
    ({"delta": jnp.zeros((2, 5, 3))}, "delta must have shape"),
    ({"A": jnp.zeros((4, 3), jnp.bfloat16)}, "A must be float32"),
    ({"A": jnp.zeros((5, 3))}, "A must have shape"),
    ({"B": jnp.zeros((2, 5, 3, 3))}, "B groups=3 must be positive and divide dim=4"),
    ({"C": jnp.zeros((2, 6, 2, 3))}, "C must have shape"),
    ({"D": jnp.zeros((3,))}, "D must have shape"),
    ({"z": jnp.zeros((2, 5, 4), jnp.int32)}, "z must be float32, bfloat16 or float16"),
    ({"delta_bias": jnp.zeros((4, 1))}, "delta_bias must have rank 1"),
]


@pytest.mark.parametrize("override,message", BAD)
def test_bad_arguments_name_the_argument(rng, override, message):
    kwargs = {**_good(rng), **override}
    with pytest.raises(ValueError, match=re.escape(message)):
        selective_scan_fn(**kwargs)


def test_bad_impl_and_layout(rng):
    kwargs = _good(rng)
    with pytest.raises(ValueError, match="impl must be one of"):
        selective_scan_fn(**kwargs, impl="cuda")
    with pytest.raises(ValueError, match="layout must be"):
        selective_scan_fn(**kwargs, layout="bdl")
