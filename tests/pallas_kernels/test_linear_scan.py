"""The linear-recurrence scan primitive (pallas_kernels._linear_scan): against a sequential float64 loop, inside a
Pallas kernel in interpret mode and as plain XLA, both directions, any axis, awkward lengths; its Triton lowering
(checked on the CPU by lowering for an H100) is one ``tt.scan`` with the right direction; and the selective scan's
state passing built on it against a sequential loop over stretches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from compare.kernels.triton_ir import triton_modules
from compare.parity.tolerances import assert_close
from pallas_kernels._linear_scan import linear_scan
from pallas_kernels.selective_scan import state_passing


def sequential(a, b, axis, reverse):
    """(a_cum, h) of h_t = a_t h_{t-1} + b_t (or from the end), step by step in float64."""
    a = np.moveaxis(np.asarray(a, np.float64), axis, 0)
    b = np.moveaxis(np.asarray(b, np.float64), axis, 0)
    order = range(a.shape[0] - 1, -1, -1) if reverse else range(a.shape[0])
    h, p = np.zeros(a.shape[1:]), np.ones(a.shape[1:])
    hs, ps = np.empty_like(a), np.empty_like(a)
    for t in order:
        h, p = a[t] * h + b[t], p * a[t]
        hs[t], ps[t] = h, p
    return np.moveaxis(ps, 0, axis), np.moveaxis(hs, 0, axis)


def random_pair(rng, shape):
    a = jnp.asarray(rng.uniform(0.3, 1.0, shape), jnp.float32)
    return a, jnp.asarray(rng.normal(size=shape), jnp.float32)


@pytest.mark.parametrize("shape,axis", [((1, 3, 2), 0), ((7, 4, 8), 0), ((16, 5), 1), ((2, 33, 3), 1), ((4, 2, 9), -1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_in_kernel_matches_sequential_loop(rng, shape, axis, reverse):
    a, b = random_pair(rng, shape)

    def kernel(a_ref, b_ref, cum_ref, h_ref):
        cum_ref[...], h_ref[...] = linear_scan(a_ref[...], b_ref[...], axis=axis, reverse=reverse)

    out = jax.ShapeDtypeStruct(shape, jnp.float32)
    cum, h = pl.pallas_call(kernel, out_shape=[out, out], interpret=True)(a, b)
    want_cum, want_h = sequential(a, b, axis, reverse)
    assert_close("a_cum", cum, want_cum, jnp.float32)
    assert_close("h", h, want_h, jnp.float32)


def test_outside_kernels_under_jit(rng):
    a, b = random_pair(rng, (5, 130))
    cum, h = jax.jit(lambda a, b: linear_scan(a, b, axis=1, reverse=True))(a, b)
    want_cum, want_h = sequential(a, b, 1, True)
    assert_close("a_cum", cum, want_cum, jnp.float32)
    assert_close("h", h, want_h, jnp.float32)


def test_refuses_mismatched_or_non_float32_operands():
    with pytest.raises(ValueError, match=r"float32 a and b of one shape, got a float32\(3,\) and b float32\(4,\)"):
        linear_scan(jnp.ones(3), jnp.ones(4))
    with pytest.raises(ValueError, match="bfloat16"):
        linear_scan(jnp.ones(3, jnp.bfloat16), jnp.ones(3, jnp.bfloat16))


@pytest.mark.parametrize("reverse", [False, True])
def test_triton_lowering_is_one_scan_in_the_right_direction(reverse):
    def kernel(a_ref, b_ref, h_ref):
        h_ref[...] = linear_scan(a_ref[...], b_ref[...], axis=0, reverse=reverse)[1]

    x = jax.ShapeDtypeStruct((16, 8), jnp.float32)
    call = pl.pallas_call(kernel, out_shape=x, interpret=False, name="scan_probe")
    ((_, ir),) = triton_modules(call, x, x)
    scans = [line for line in ir.splitlines() if '"tt.scan"' in line]
    assert len(scans) == 1, ir
    assert f"reverse = {str(reverse).lower()}" in scans[0], scans[0]
    assert "arith.mulf" in ir and "arith.addf" in ir


def test_state_passing_composes_stretches_in_order(rng):
    """segment_start_states / chunk_end_adjoints against a loop applying each stretch's map v -> exp(A s) v + e."""
    batch, stretches, dim, dstate = 2, 5, 3, 4
    A = -np.exp(rng.uniform(-2, 1, (dim, dstate)))
    local = rng.normal(size=(batch, stretches, dstate, dim))
    sums = rng.uniform(0, 0.5, (batch, stretches, dim))
    dlast = rng.normal(size=(batch, dstate, dim))
    decay = np.exp(sums[:, :, None, :] * A.T[None, None])
    pad = lambda x: jnp.asarray(np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, 1)]), jnp.float32)  # noqa: E731
    A32, sums32 = jnp.asarray(A, jnp.float32), jnp.asarray(sums, jnp.float32)

    starts = state_passing.segment_start_states(pad(local), sums32, A32)
    v, want = np.zeros((batch, dstate, dim)), []
    for s in range(stretches + 1):
        want.append(v)
        if s < stretches:
            v = decay[:, s] * v + local[:, s]
    assert_close("segment starts", starts[..., :dim], np.stack(want, 1), jnp.float32)

    after = state_passing.chunk_end_adjoints(pad(local), sums32, A32, pad(dlast))
    v, want = dlast, [dlast]
    for s in reversed(range(stretches)):
        v = decay[:, s] * v + local[:, s]
        want.insert(0, v)
    assert_close("chunk adjoints", after[..., :dim], np.stack(want, 1), jnp.float32)
    assert np.all(np.asarray(after[..., dim:]) == 0) and np.all(np.asarray(starts[..., dim:]) == 0)
