"""Mamba-3's SISO scan on the Pallas kernels as a differentiable function (``jax.custom_vjp``).

``decayed_scan(x, scale, log_decay, k, q, D, start)`` is y_t = S'_t q_t + D x_t over S'_t = exp(log_decay_t) S'_{t-1} +
scale_t x_t k_tᵀ from S'_{-1} = start: the passes of ``mosaic_gpu.scan``. Arguments as ``kernel_scan`` forms them:
x (batch, L, H, P) and k, q (batch, L, H, N) in one 16-bit dtype; scale, log_decay (batch, H, L) float32; D (H, P)
float32 or None; start (batch, H, P, N) float32 or None. Returns (y (batch, L, H, P) in x's dtype, the final state
(batch, H, P, N) float32). The backward keeps every block's incoming state (batch, L / 64, H, P, N) in x's dtype.
"""

import functools

import jax
from jax.ad_checkpoint import checkpoint_name

from pallas_kernels.mamba3.mosaic_gpu.scan import scan_backward, scan_forward
from pallas_kernels.ssd.config import SsdConfig
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.mosaic_gpu.common import decay_vectors

# The kept states' name for jax.checkpoint policies (a rematerialized layer that saves them never reruns the forward
# kernel for them), as the SSD's.
STATES_NAME = "mamba3_states"
OUTPUT_NAME = "mamba3_scan_output"  # the kernels' output (``kernel_scan``), which a layer's remat keeps beside them

# Each pass under jax.jit, so that every layer of a model shares one lowering of each kernel (as the SSD's passes).
_forward_once = jax.jit(scan_forward, static_argnums=(6, 7, 8))
_backward_once = jax.jit(scan_backward, static_argnums=(8, 9))


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def decayed_scan(x, scale, log_decay, k, q, D, start, dims: SsdDims, config: SsdConfig):
    y, final, _ = _forward_once(x, decay_vectors(scale, log_decay), k, q, D, start, dims, config, False)
    return y, final


def _decayed_scan_fwd(x, scale, log_decay, k, q, D, start, dims, config):
    y, final, states = _forward_once(x, decay_vectors(scale, log_decay), k, q, D, start, dims, config, True)
    return (y, final), (x, scale, log_decay, k, q, D, checkpoint_name(states, STATES_NAME))


def _decayed_scan_bwd(dims: SsdDims, config: SsdConfig, residuals, cotangents):
    x, scale, log_decay, k, q, D, states = residuals
    dy, dfinal = cotangents
    vectors = decay_vectors(scale, log_decay)
    dx, dscale, dlog, dk, dq, dD, dstart = _backward_once(
        x, vectors, k, q, D, states, dy.astype(x.dtype), dfinal.astype("float32"), dims, config
    )
    return dx, dscale.astype(scale.dtype), dlog.astype(log_decay.dtype), dk, dq, dD, dstart


decayed_scan.defvjp(_decayed_scan_fwd, _decayed_scan_bwd)
