"""The Pallas causal conv1d as a differentiable function: forward kernel, backward kernel, ``jax.custom_vjp``.

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

from pallas_kernels._triton import next_pow2
from pallas_kernels.causal_conv1d import reference
from pallas_kernels.causal_conv1d.config import ConvConfig
from pallas_kernels.causal_conv1d.kernel import ConvDims, conv_backward, conv_forward


def _dims(x, weight, bias, seq_idx, initial_states, silu: bool, config: ConvConfig, interpret: bool, *, bwd: bool):
    batch, seqlen, dim = x.shape
    block_l, block_d = (config.bwd_block_l, config.bwd_block_d) if bwd else (config.block_l, config.block_d)
    return ConvDims(
        batch=batch,
        seqlen=seqlen,
        dim=dim,
        width=weight.shape[1],
        has_bias=bias is not None,
        has_seq_idx=seq_idx is not None,
        has_initial=initial_states is not None,
        silu=silu,
        block_l=min(block_l, next_pow2(seqlen)),
        block_d=min(block_d, next_pow2(dim)),
        interpret=interpret,
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def causal_conv1d(x, weight, bias, seq_idx, initial_states, silu: bool, config: ConvConfig, interpret: bool):
    dims = _dims(x, weight, bias, seq_idx, initial_states, silu, config, interpret, bwd=False)
    return conv_forward(x, weight, bias, seq_idx, initial_states, dims, config.num_warps)


def _fwd(x, weight, bias, seq_idx, initial_states, silu, config, interpret):
    out = causal_conv1d(x, weight, bias, seq_idx, initial_states, silu, config, interpret)
    return out, (x, weight, bias, seq_idx, initial_states)


def _bwd(silu, config, interpret, residuals, dout):
    x, weight, bias, seq_idx, initial_states = residuals
    dout = dout.astype(x.dtype)
    dims = _dims(x, weight, bias, seq_idx, initial_states, silu, config, interpret, bwd=True)
    dx, dw, dbias = conv_backward(x, weight, bias, seq_idx, initial_states, dout, dims, config.bwd_num_warps)
    dw = dw.sum(axis=(0, 1)).T.astype(weight.dtype)  # partials (batch, L blocks, width, dim) in a fixed order
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
