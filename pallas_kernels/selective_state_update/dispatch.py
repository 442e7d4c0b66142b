"""Which kernel runs the Pallas selective state update (``StateUpdateConfig.backend``): the Triton kernel
(``triton/kernel.py``: a program per (batch row, head, ``block_p`` head dims)) or the Mosaic GPU step kernel
(``mosaic_gpu/kernel.py``, shared with Mamba-3's decoding steps: P in whole 64-row tiles, N in 8-column tiles,
Hopper). For the Mosaic GPU kernel XLA forms the step's vectors: the decay over P (exp(dt A) where A is one value a
head) or dt with A's (P, N) tile (Mamba-1's A), the term (dt x, B) and the read-out C (the head's group's); D and
the gate z follow in XLA.

Arguments are pre-checked by ``api.selective_state_update`` and in the kernels' layout (heads axis present)."""

import jax
import jax.numpy as jnp

from pallas_kernels._triton import gpu_has_wgmma, next_pow2
from pallas_kernels.selective_state_update.config import StateUpdateConfig
from pallas_kernels.selective_state_update.mosaic_gpu.kernel import ROWS, covers, state_step
from pallas_kernels.selective_state_update.triton.kernel import StepDims, state_update_step


def mosaic_refusal(headdim: int, dstate: int, interpret: bool) -> str | None:
    """Why the Mosaic GPU kernel cannot take this state, or None where it can."""
    if not covers(headdim, dstate):
        return f"the state's head dims (P = {headdim}) must be a multiple of {ROWS} and N (= {dstate}) of 8"
    if not interpret and not gpu_has_wgmma():
        return "the GPU is not a Hopper (compute capability 9.x): use StateUpdateConfig(backend='triton')"
    return None


def state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus: bool, config: StateUpdateConfig, interpret: bool):
    """(out (batch, H, P) in x's dtype, new state like ``state``) by the kernel ``config.backend`` names."""
    if config.backend == "mosaic_gpu":
        return _mosaic_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, interpret)
    dims = _triton_dims(state, dt, A, B, D, z, dt_bias, dt_softplus, config, interpret)
    return state_update_step(state, x, dt, A, B, C, D, z, dt_bias, dims, config.num_warps)


def _mosaic_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, interpret):
    f32 = jnp.float32
    batch, heads, headdim, _ = state.shape
    dt = dt.astype(f32) if dt_bias is None else dt.astype(f32) + dt_bias.astype(f32)
    if dt_softplus:
        dt = jax.nn.softplus(dt)
    dt = jnp.broadcast_to(dt, (batch, heads, headdim))
    xf = x.astype(f32)
    tile = None if A.shape[-2:] == (1, 1) else jnp.broadcast_to(A.astype(f32), state.shape[1:])
    decay = dt if tile is not None else jnp.exp(dt * A[:, :, 0].astype(f32))
    per_group = heads // B.shape[1]
    rows = jnp.stack([decay, dt * xf], axis=2)  # (batch, H, 2, P)
    cols = jnp.repeat(jnp.stack([B, C], axis=2).astype(f32), per_group, axis=1)  # (batch, H, 2, N)
    new_state, y = state_step(state, rows, cols, 1, interpret, tile)
    out = y[:, :, 0]
    if D is not None:
        out = out + D.astype(f32) * xf
    if z is not None:
        out = out * jax.nn.silu(z.astype(f32))
    return out.astype(x.dtype), new_state


def _triton_dims(state, dt, A, B, D, z, dt_bias, dt_softplus, config, interpret) -> StepDims:
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
