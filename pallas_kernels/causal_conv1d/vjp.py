"""The Pallas causal conv1d as a differentiable function: forward and backward kernels (``dispatch`` picks their
backend), ``jax.custom_vjp``.

Arguments are channels-last and pre-checked by ``api.causal_conv1d_fn``: x (batch, L, dim); weight (dim, width);
bias (dim,) or None; seq_idx (batch, L) int or None; initial_states (batch, width - 1, dim) or None, the inputs
before step 0 (seq_idx and initial_states never come together). Returns out (batch, L, dim) in x.dtype. The backward
keeps only the inputs (it recomputes the pre-activation), so nothing (batch, L, dim) is saved beyond x. The initial
states' gradient comes from the first width - 1 output steps alone, the only ones that read them: the pure-JAX
reference's VJP over those steps, (batch, width - 1, dim) in size.
"""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels.causal_conv1d import dispatch, reference
from pallas_kernels.causal_conv1d.config import ConvConfig

# Both passes under ``jax.jit`` so that every call of the same shapes and config shares one lowering: a Mosaic GPU
# kernel's module carries its call's source location, so each layer would otherwise compile its own kernel
# (docs/kernels.md#compiled-once-per-shape).
_forward_once = jax.jit(dispatch.conv_forward, static_argnums=(5, 6, 7))
_backward_once = jax.jit(dispatch.conv_backward, static_argnums=(6, 7, 8))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def causal_conv1d(x, weight, bias, seq_idx, initial_states, silu: bool, config: ConvConfig, interpret: bool):
    return _forward_once(x, weight, bias, seq_idx, initial_states, silu, config, interpret)


def _fwd(x, weight, bias, seq_idx, initial_states, silu, config, interpret):
    out = causal_conv1d(x, weight, bias, seq_idx, initial_states, silu, config, interpret)
    return out, (x, weight, bias, seq_idx, initial_states)


def _bwd(silu, config, interpret, residuals, dout):
    x, weight, bias, seq_idx, initial_states = residuals
    dout = dout.astype(x.dtype)
    dx, dw, dbias = _backward_once(x, weight, bias, seq_idx, initial_states, dout, silu, config, interpret)
    dw = dw.sum(axis=(0, 1)).T.astype(weight.dtype)  # partials (batch, P, width, dim) in a fixed order
    dbias = None if bias is None else dbias.sum(axis=(0, 1)).astype(bias.dtype)
    dseq = None if seq_idx is None else jnp.zeros(seq_idx.shape, jax.dtypes.float0)
    dinitial = None if initial_states is None else _initial_states_grad(x, weight, bias, initial_states, silu, dout)
    return dx, dw, dbias, dseq, dinitial


def _initial_states_grad(x, weight, bias, initial_states, silu: bool, dout):
    """d initial_states: the reference conv's VJP over the first width - 1 output steps (all that read them)."""
    head = min(x.shape[1], weight.shape[1] - 1)
    if head == 0:  # width 1: no state
        return jnp.zeros_like(initial_states)
    activation = "silu" if silu else None
    _, pull = jax.vjp(
        lambda states: reference.causal_conv1d(x[:, :head], weight, bias, None, states, activation)[0], initial_states
    )
    return pull(dout[:, :head])[0]


causal_conv1d.defvjp(_fwd, _bwd)
