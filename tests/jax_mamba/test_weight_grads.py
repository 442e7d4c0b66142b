"""``tie_weight_grad``: an identity whose backward, inside ``early_weight_grads()``, releases a weight's gradient and
its input's together (one optimization barrier); outside it, nothing at all."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

from jax_mamba.modules.weight_grads import early_weight_grads, tie_weight_grad


def _loss(x, w):
    x, w = tie_weight_grad(x, w)
    return jnp.sum(jnp.tanh(x @ w) ** 2)


def _inputs(seed: int):
    kx, kw = jax.random.split(jax.random.key(seed))
    return jax.random.normal(kx, (5, 3, 7)), jax.random.normal(kw, (7, 4))


def test_tied_gradients_equal_untied_ones():
    x, w = _inputs(0)
    plain = jax.jit(jax.grad(lambda x, w: jnp.sum(jnp.tanh(x @ w) ** 2), argnums=(0, 1)))(x, w)
    with early_weight_grads():
        tied = jax.jit(jax.grad(_loss, argnums=(0, 1)))(x, w)
    for got, want in zip(tied, plain, strict=True):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _program(x, w, early: bool) -> str:
    """The gradient's jaxpr, the context entered inside the traced function (as the train step does: JAX's trace
    caches do not key on it)."""

    def grad(x, w):
        with early_weight_grads() if early else contextlib.nullcontext():
            return jax.grad(_loss, argnums=(0, 1))(x, w)

    return str(jax.make_jaxpr(grad)(x, w))


def test_barrier_only_inside_the_context():
    x, w = _inputs(1)
    assert "optimization_barrier" not in _program(x, w, early=False)
    assert _program(x, w, early=True).count("optimization_barrier") == 1
    assert "optimization_barrier" not in _program(x, w, early=False)  # the context was left
