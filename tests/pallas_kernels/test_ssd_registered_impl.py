"""pallas_kernels.ssd's registered impls (how torch_reference adds impl="mamba_ssm_triton" without this package
importing torch): checked arguments reach the impl, bad input is refused before it runs, gradients flow through a
differentiable impl, names are guarded."""

import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels.ssd import api
from pallas_kernels.ssd.api import MAMBA_SSM_TRITON, mamba_chunk_scan_combined, register_impl


def inputs(rng, batch=2, seqlen=5, nheads=4, headdim=3, ngroups=2, dstate=6):
    f = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)  # noqa: E731
    return (
        f(batch, seqlen, nheads, headdim),
        f(batch, seqlen, nheads),
        -jnp.abs(f(nheads)),
        f(batch, seqlen, ngroups, dstate),
        f(batch, seqlen, ngroups, dstate),
    )


def test_unregistered_mamba_ssm_triton_says_what_to_import(monkeypatch, rng):
    monkeypatch.setattr(api, "_REGISTERED", {})  # as in a process that never imported torch_reference.ssd_jax_triton
    x, dt, A, B, C = inputs(rng)
    with pytest.raises(NotImplementedError, match=r"import torch_reference\.ssd_jax_triton"):
        mamba_chunk_scan_combined(x, dt, A, B, C, 4, impl=MAMBA_SSM_TRITON)


def test_a_registered_impl_gets_the_checked_arguments(monkeypatch, rng):
    monkeypatch.setattr(api, "_REGISTERED", {})
    calls = []
    out = jnp.asarray(rng.standard_normal((2, 5, 4, 3)), jnp.float32)
    final = jnp.asarray(rng.standard_normal((2, 4, 3, 6)), jnp.float32)

    def forward(*args):
        calls.append(args)
        return (out, final) if args[13] else out

    register_impl(MAMBA_SSM_TRITON, forward)
    x, dt, A, B, C = inputs(rng)
    D = jnp.ones((4,), jnp.float32)
    got = mamba_chunk_scan_combined(x, dt, A, B, C, 4, D=D, dt_softplus=True, impl=MAMBA_SSM_TRITON)
    np.testing.assert_array_equal(got, out)
    (args,) = calls
    assert len(args) == 14 and args[0] is x and args[5] == 4 and args[6] is D and args[11] is True
    assert args[13] is False
    got, got_final = mamba_chunk_scan_combined(x, dt, A, B, C, 4, return_final_states=True, impl=MAMBA_SSM_TRITON)
    np.testing.assert_array_equal(got_final, final)
    assert calls[-1][13] is True
    with pytest.raises(ValueError, match=r"dt must have shape \(batch, L, H\)"):
        mamba_chunk_scan_combined(x, dt[:, :4], A, B, C, 4, impl=MAMBA_SSM_TRITON)
    assert len(calls) == 2  # the bad call never reached the impl


def test_gradients_flow_through_a_differentiable_registered_impl(monkeypatch, rng):
    """The api adds nothing between the caller and the impl's own VJP: gradients are the impl's."""
    import jax

    monkeypatch.setattr(api, "_REGISTERED", {})

    def impl(x, dt, A, B, C, chunk, D, z, dt_bias, init, seq_idx, softplus, limit, with_final):
        return x * dt[..., None] * 3.0

    register_impl(MAMBA_SSM_TRITON, impl)
    x, dt, A, B, C = inputs(rng)
    loss = lambda x, dt: mamba_chunk_scan_combined(x, dt, A, B, C, 4, impl=MAMBA_SSM_TRITON).sum()  # noqa: E731
    dx, ddt = jax.grad(loss, argnums=(0, 1))(x, dt)
    np.testing.assert_allclose(dx, jnp.broadcast_to(3.0 * dt[..., None], x.shape), rtol=1e-6)
    # float32 sums over P in another order: each element within 1e-5 of the sum of its terms' magnitudes (a plain
    # relative tolerance fails where the terms cancel to near zero)
    err, scale = np.abs(np.asarray(ddt) - 3.0 * np.asarray(x).sum(-1)), 3.0 * np.abs(np.asarray(x)).sum(-1)
    assert (err <= 1e-5 * scale).all(), float((err / scale).max())


def test_built_in_impls_cannot_be_replaced():
    with pytest.raises(ValueError, match="built in"):
        register_impl("pallas", lambda *a: None)
