"""The Pallas selective state update as a differentiable function: the kernel forward, the reference's vjp backward
(decoding does not differentiate; the backward exists so that a gradient is right if one is taken).

Arguments are pre-checked by ``api.selective_state_update`` and in ``kernel``'s layout (heads axis present)."""

import functools

import jax

from pallas_kernels._triton import next_pow2
from pallas_kernels.selective_state_update import reference
from pallas_kernels.selective_state_update.config import StateUpdateConfig
from pallas_kernels.selective_state_update.kernel import StepDims, state_update_step


def step_dims(state, dt, A, B, D, z, dt_bias, dt_softplus: bool, config: StateUpdateConfig, interpret: bool):
    batch, nheads, headdim, dstate = state.shape
    return StepDims(
        batch=batch,
        nheads=nheads,
        headdim=headdim,
        dstate=dstate,
        ngroups=B.shape[1],
        block_p=min(config.block_p, next_pow2(headdim)),
        block_n=next_pow2(dstate),
        dt_per_head=dt.shape[-1] == 1 and headdim > 1,
        a_per_head=A.shape[-2:] == (1, 1) and (headdim, dstate) != (1, 1),
        d_per_head=D is not None and D.shape[-1] == 1 and headdim > 1,
        bias_per_head=dt_bias is not None and dt_bias.shape[-1] == 1 and headdim > 1,
        has_d=D is not None,
        has_z=z is not None,
        has_bias=dt_bias is not None,
        softplus=dt_softplus,
        interpret=interpret,
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(9, 10, 11))
def selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, config, interpret):
    dims = step_dims(state, dt, A, B, D, z, dt_bias, dt_softplus, config, interpret)
    return state_update_step(state, x, dt, A, B, C, D, z, dt_bias, dims, config.num_warps)


def _fwd(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, config, interpret):
    out = selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, config, interpret)
    return out, (state, x, dt, A, B, C, D, z, dt_bias)


def _bwd(dt_softplus, config, interpret, residuals, cotangents):
    step = lambda *args: reference.selective_state_update(*args, dt_softplus)  # noqa: E731
    _, vjp = jax.vjp(step, *residuals)
    return vjp(cotangents)


selective_state_update.defvjp(_fwd, _bwd)
