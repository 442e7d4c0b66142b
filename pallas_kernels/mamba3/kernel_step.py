"""Mamba-3's decoding step on the decoding steps' Mosaic GPU kernel (``selective_state_update.mosaic_gpu.kernel``,
shared with the selective state update): ``reference.step_state``'s signature and results for float32 arithmetic,
so that the reference's SISO and MIMO steps run it in place of their own (``dispatch``).

The step S' = alpha S + alpha Delta (1 - sigma) sum_r u0_r k0_rᵀ + Delta sigma sum_r u_r k_rᵀ, y_r = S' q_r becomes
the kernel's decay alpha, 2R rank-1 terms (their weights folded into the (P,) vectors) and R read-outs; the vectors,
(batch, H, P) and (batch, H, N) each, are formed by XLA. The new state comes back in the input state's dtype (a
16-bit cache is read and written in 16 bits). Decoding does not differentiate; a gradient, if taken, is the
reference's (``jax.custom_vjp``)."""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels.mamba3 import reference
from pallas_kernels.selective_state_update.mosaic_gpu.kernel import covers, state_step


def on_step_kernel(dtype, headdim: int, dstate: int) -> bool:
    """Whether the kernel runs the step for V of ``dtype`` (float32 arithmetic: not float64) and this P and N."""
    return reference.arithmetic_dtype(dtype) == jnp.float32 and covers(headdim, dstate)


@functools.partial(jax.custom_vjp, nondiff_argnums=(9,))
def kernel_step_state(ssm0, q, k, u, u0, k0, ADT, DT, Trap, interpret: bool):
    """``reference.step_state`` (q, k, k0 (batch, R, H, N); u, u0 (batch, R, H, P); ssm0 (batch, H, P, N); ADT, DT,
    Trap (batch, H)) with float32 arithmetic: (new state (batch, H, P, N) in ssm0's dtype, y (batch, R, H, P)
    float32)."""
    f32 = jnp.float32
    batch, heads, headdim, _ = ssm0.shape
    sigma, dt, alpha = jax.nn.sigmoid(Trap.astype(f32)), DT.astype(f32), jnp.exp(ADT.astype(f32))
    on_head = lambda w: w[:, None, :, None]  # noqa: E731  (batch, H) -> over ranks and P
    decay = jnp.broadcast_to(on_head(alpha), (batch, 1, heads, headdim))
    rows = jnp.concatenate([decay, on_head(alpha * dt * (1 - sigma)) * u0, on_head(dt * sigma) * u], axis=1)
    cols = jnp.concatenate([k0, k, q], axis=1)
    rows, cols = (jnp.swapaxes(x.astype(f32), 1, 2) for x in (rows, cols))  # (batch, H, vectors, P or N)
    state, y = state_step(ssm0, rows, cols, q.shape[1], interpret)
    return state, jnp.swapaxes(y, 1, 2)


def _fwd(ssm0, q, k, u, u0, k0, ADT, DT, Trap, interpret):
    return kernel_step_state(ssm0, q, k, u, u0, k0, ADT, DT, Trap, interpret), (ssm0, q, k, u, u0, k0, ADT, DT, Trap)


def _bwd(interpret, residuals, cotangents):
    ssm0, (dstate, dy) = residuals[0], cotangents
    step = lambda *args: reference.step_state(*args, jnp.float32)  # noqa: E731
    _, vjp = jax.vjp(step, *residuals)
    grads = vjp((dstate.astype(jnp.float32), dy))
    return (grads[0].astype(ssm0.dtype), *grads[1:])


kernel_step_state.defvjp(_fwd, _bwd)
