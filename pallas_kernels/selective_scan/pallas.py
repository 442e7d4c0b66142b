"""The Pallas selective scan as a differentiable function: forward kernel, backward kernel, ``jax.custom_vjp``.

Arguments are channels-last and pre-checked by ``api.selective_scan_fn``: u, delta, z (batch, L, dim); B, C
(batch, L, G, N); A (dim, N) float32; D, delta_bias (dim,) or None. Returns (out (batch, L, dim) in u.dtype,
last state (batch, dim, N) float32). Residuals for the backward: the inputs and the float32 states
(batch, L / kept_every, N, dim + 1) every ``config.kept_every`` steps; where that is coarser than the backward's
chunk (``config.checkpoint_every``), the backward first rebuilds the states at every chunk start from them.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from pallas_kernels.selective_scan.block_sums import sum_block_partials
from pallas_kernels.selective_scan.config import ScanConfig
from pallas_kernels.selective_scan.kernel_bwd import scan_backward
from pallas_kernels.selective_scan.kernel_bwd_chunked import scan_backward_chunked
from pallas_kernels.selective_scan.kernel_fwd import scan_forward
from pallas_kernels.selective_scan.kernel_fwd_chunked import rebuild_states, scan_forward_chunked
from pallas_kernels.selective_scan.kernel_segment_states import chunk_start_adjoints, segment_end_states
from pallas_kernels.selective_scan.state_passing import chunk_end_adjoints, segment_start_states
from pallas_kernels.selective_scan.tiles import padded_rows, scan_dims

# The kept states' name for jax.checkpoint policies: a rematerialized region that saves them
# (jax.checkpoint_policies.save_only_these_names(STATES_NAME)) recomputes the scan's inputs in the backward, not
# the scan itself (the recomputed forward's outputs go unused, and XLA drops its kernels).
STATES_NAME = "selective_scan_states"


def _forward(u, delta, A, B, C, D, z, delta_bias, softplus, config, interpret, save_states):
    dims = scan_dims(u, B, A, D, z, delta_bias, softplus, config, interpret, bwd=False)
    if config.design == "chunked":
        starts = _segment_starts(u, delta, A, B, delta_bias, dims, config.num_warps)
        out, last, states = scan_forward_chunked(
            u, delta, A, B, C, D, z, delta_bias, starts, dims, config.num_warps, save_states
        )
    else:
        out, last, states = scan_forward(u, delta, A, B, C, D, z, delta_bias, dims, config.num_warps, save_states)
    return out, jnp.swapaxes(last, 1, 2), states


def _segment_starts(u, delta, A, B, delta_bias, dims, num_warps):
    """Every forward segment's start state (batch, nsegments, N, dim + 1): the segments' own end states from zero
    (one kernel), composed in order."""
    if dims.nsegments == 1:
        return jnp.zeros((dims.batch, 1, dims.dstate, dims.dim + 1), jnp.float32)
    ends, dt_sums = segment_end_states(u, delta, A, B, delta_bias, dims, num_warps)
    return segment_start_states(ends, dt_sums, A)


@functools.partial(jax.custom_vjp, nondiff_argnums=(8, 9, 10))
def selective_scan(u, delta, A, B, C, D, z, delta_bias, softplus: bool, config: ScanConfig, interpret: bool):
    out, last, _ = _forward(u, delta, A, B, C, D, z, delta_bias, softplus, config, interpret, save_states=False)
    return out, last


def _selective_scan_fwd(u, delta, A, B, C, D, z, delta_bias, softplus, config, interpret):
    out, last, states = _forward(u, delta, A, B, C, D, z, delta_bias, softplus, config, interpret, save_states=True)
    return (out, last), (u, delta, A, B, C, D, z, delta_bias, checkpoint_name(states, STATES_NAME))


def _selective_scan_bwd(softplus, config, interpret, residuals, cotangents):
    u, delta, A, B, C, D, z, delta_bias, states = residuals
    dout, dlast = cotangents
    dims = scan_dims(u, B, A, D, z, delta_bias, softplus, config, interpret, bwd=True)
    if config.rebuilds_states:
        kept = scan_dims(u, B, A, D, z, delta_bias, softplus, config, interpret, bwd=False)
        kept = dataclasses.replace(kept, save_every=config.save_every, segment_len=config.kept_every)
        states = rebuild_states(u, delta, A, B, delta_bias, states, kept, config.num_warps)
    dout = dout.astype(u.dtype)
    dlast = jnp.swapaxes(dlast.astype(jnp.float32), 1, 2)
    warps = config.bwd_num_warps
    if config.bwd_design == "chunked":
        after = _chunk_adjoints(delta, A, C, dout, z, delta_bias, padded_rows(dlast), dims, warps)
        du, ddelta, dz, dB, dC, dA, dD, dbias = scan_backward_chunked(
            u, delta, A, B, C, D, z, delta_bias, states, after, dout, dims, warps
        )
        summed = (0, 1)  # per-chunk partials of dA, dD, d bias: (batch, chunks, ...)
    else:
        du, ddelta, dz, dB, dC, dA, dD, dbias = scan_backward(
            u, delta, A, B, C, D, z, delta_bias, states, dout, dlast, dims, warps
        )
        dB, dC = sum_block_partials(dB, dC, B.dtype, interpret)  # per-channel-block partials
        summed = (0,)
    dA = dA.sum(axis=summed).T.astype(A.dtype)
    dD = None if D is None else dD.sum(axis=summed).astype(D.dtype)
    dbias = None if delta_bias is None else dbias.sum(axis=summed).astype(delta_bias.dtype)
    return du, ddelta, dA, dB.astype(B.dtype), dC.astype(C.dtype), dD, dz, dbias


def _chunk_adjoints(delta, A, C, dout, z, delta_bias, dlast, dims, num_warps):
    """The adjoint right after every backward chunk (batch, nchunks, N, dim + 1): the chunks' own start adjoints
    from zero (one kernel), composed last to first from d last_state (batch, N, dim + 1)."""
    if dims.nchunks == 1:
        return dlast[:, None]
    starts, dt_sums = chunk_start_adjoints(delta, A, C, dout, z, delta_bias, dims, num_warps)
    return chunk_end_adjoints(starts, dt_sums, A, dlast)


selective_scan.defvjp(_selective_scan_fwd, _selective_scan_bwd)
