"""The Pallas selective scan as a differentiable function: forward kernel, backward kernel, ``jax.custom_vjp``.

Arguments are channels-last and pre-checked by ``api.selective_scan_fn``: u, delta, z (batch, L, dim); B, C
(batch, L, G, N); A (dim, N) float32; D, delta_bias (dim,) or None. Returns (out (batch, L, dim) in u.dtype,
last state (batch, dim, N) float32). Residuals for the backward: the inputs and the float32 chunk-start states
(batch, L / chunk, N, dim).
"""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels.selective_scan.config import ScanConfig
from pallas_kernels.selective_scan.kernel_bwd import scan_backward
from pallas_kernels.selective_scan.kernel_fwd import scan_forward
from pallas_kernels.selective_scan.tiles import scan_dims


def _forward(u, delta, A, B, C, D, z, delta_bias, softplus, config, interpret, save_states):
    dims = scan_dims(u, B, A, D, z, delta_bias, softplus, config, interpret, bwd=False)
    out, last, states = scan_forward(u, delta, A, B, C, D, z, delta_bias, dims, config.num_warps, save_states)
    return out, jnp.swapaxes(last, 1, 2), states


@functools.partial(jax.custom_vjp, nondiff_argnums=(8, 9, 10))
def selective_scan(u, delta, A, B, C, D, z, delta_bias, softplus: bool, config: ScanConfig, interpret: bool):
    out, last, _ = _forward(u, delta, A, B, C, D, z, delta_bias, softplus, config, interpret, save_states=False)
    return out, last


def _selective_scan_fwd(u, delta, A, B, C, D, z, delta_bias, softplus, config, interpret):
    out, last, states = _forward(u, delta, A, B, C, D, z, delta_bias, softplus, config, interpret, save_states=True)
    return (out, last), (u, delta, A, B, C, D, z, delta_bias, states)


def _selective_scan_bwd(softplus, config, interpret, residuals, cotangents):
    u, delta, A, B, C, D, z, delta_bias, states = residuals
    dout, dlast = cotangents
    dims = scan_dims(u, B, A, D, z, delta_bias, softplus, config, interpret, bwd=True)
    dlast = jnp.swapaxes(dlast.astype(jnp.float32), 1, 2)
    du, ddelta, dz, dB, dC, dA, dD, dbias = scan_backward(
        u, delta, A, B, C, D, z, delta_bias, states, dout.astype(u.dtype), dlast, dims, config.bwd_num_warps
    )
    dB = dB.sum(axis=3).astype(B.dtype)
    dC = dC.sum(axis=3).astype(C.dtype)
    dA = dA.sum(axis=0).T.astype(A.dtype)
    dD = None if D is None else dD.sum(axis=0).astype(D.dtype)
    dbias = None if delta_bias is None else dbias.sum(axis=0).astype(delta_bias.dtype)
    return du, ddelta, dA, dB, dC, dD, dz, dbias


selective_scan.defvjp(_selective_scan_fwd, _selective_scan_bwd)
