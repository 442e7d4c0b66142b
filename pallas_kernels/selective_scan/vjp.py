"""The Pallas selective scan as a differentiable function: its forward and backward passes (``dispatch``) under
``jax.custom_vjp``.

Arguments are channels-last and pre-checked by ``api.selective_scan_fn``: u, delta, z (batch, L, dim); B, C
(batch, L, G, N); A (dim, N) float32; D, delta_bias (dim,) or None; keep (batch, L) float32, packed sequences'
keep mask (``reference.keep_mask``), or None. Returns (out (batch, L, dim) in u.dtype,
last state (batch, dim, N) float32). Residuals for the backward: the inputs and the float32 states
(batch, L / kept_every, N, dim + 1) every ``config.kept_every`` steps; where that is coarser than the backward's
chunk (``config.checkpoint_every``), the backward first rebuilds the states at every chunk start from them.
"""

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from pallas_kernels.selective_scan.config import ScanConfig
from pallas_kernels.selective_scan.dispatch import rebuild_saved_states, scan_backward_pass, scan_forward_pass

# The kept states' name for jax.checkpoint policies: a rematerialized region that saves them
# (jax.checkpoint_policies.save_only_these_names(STATES_NAME)) recomputes the scan's inputs in the backward, not
# the scan itself (the recomputed forward's outputs go unused, and XLA drops its kernels).
STATES_NAME = "selective_scan_states"

# Every pass under ``jax.jit`` so that every call of the same shapes and config shares one lowering: a Mosaic GPU
# kernel's module carries its call's source location, so each layer would otherwise compile its own kernel
# (docs/kernels.md#compiled-once-per-shape).
_forward_once = jax.jit(scan_forward_pass, static_argnums=(9, 10, 11, 12))
_rebuild_once = jax.jit(rebuild_saved_states, static_argnums=(8, 9, 10))
_backward_once = jax.jit(scan_backward_pass, static_argnums=(9, 10, 11))


@functools.partial(jax.custom_vjp, nondiff_argnums=(9, 10, 11))
def selective_scan(u, delta, A, B, C, D, z, delta_bias, keep, softplus: bool, config: ScanConfig, interpret: bool):
    args = (u, delta, A, B, C, D, z, delta_bias, keep, softplus, config, interpret)
    out, last, _ = _forward_once(*args, False)
    return out, last


def _selective_scan_fwd(u, delta, A, B, C, D, z, delta_bias, keep, softplus, config, interpret):
    args = (u, delta, A, B, C, D, z, delta_bias, keep, softplus, config, interpret)
    out, last, states = _forward_once(*args, True)
    return (out, last), (u, delta, A, B, C, D, z, delta_bias, keep, checkpoint_name(states, STATES_NAME))


def _selective_scan_bwd(softplus, config, interpret, residuals, cotangents):
    u, delta, A, B, C, D, z, delta_bias, keep, states = residuals
    dout, dlast = cotangents
    if config.rebuilds_states:
        states = _rebuild_once(u, delta, A, B, D, z, delta_bias, keep, softplus, config, interpret, states)
    dout = dout.astype(u.dtype)
    dlast = jnp.swapaxes(dlast.astype(jnp.float32), 1, 2)
    du, ddelta, dz, dB, dC, dA, dD, dbias = _backward_once(
        u, delta, A, B, C, D, z, delta_bias, keep, softplus, config, interpret, states, dout, dlast
    )
    dA = dA.astype(A.dtype)
    dD = None if D is None else dD.astype(D.dtype)
    dbias = None if delta_bias is None else dbias.astype(delta_bias.dtype)
    dkeep = None if keep is None else jnp.zeros_like(keep)  # a mask of the sequences' bounds: no gradient
    return du, ddelta, dA, dB.astype(B.dtype), dC.astype(C.dtype), dD, dz, dbias, dkeep


selective_scan.defvjp(_selective_scan_fwd, _selective_scan_bwd)
