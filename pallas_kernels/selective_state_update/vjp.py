"""The Pallas selective state update as a differentiable function: the kernels' forward (``dispatch``), the
reference's vjp backward (decoding does not differentiate; the backward exists so that a gradient is right if one is
taken).

Arguments are pre-checked by ``api.selective_state_update`` and in the kernels' layout (heads axis present)."""

import functools

import jax

from pallas_kernels.selective_state_update import dispatch, reference


@functools.partial(jax.custom_vjp, nondiff_argnums=(9, 10, 11))
def selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, config, interpret):
    return dispatch.state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, config, interpret)


def _fwd(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, config, interpret):
    out = selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, config, interpret)
    return out, (state, x, dt, A, B, C, D, z, dt_bias)


def _bwd(dt_softplus, config, interpret, residuals, cotangents):
    step = lambda *args: reference.selective_state_update(*args, dt_softplus)  # noqa: E731
    _, vjp = jax.vjp(step, *residuals)
    return vjp(cotangents)


selective_state_update.defvjp(_fwd, _bwd)
