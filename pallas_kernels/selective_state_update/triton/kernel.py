"""The Pallas kernel of one selective-state-update step: each state element is read once and written once.

Grid (batch, heads, blocks of ``block_p`` head dims). A program loads its (block_p, N) float32 tile of the state,
its x, dt (and z) values, its head's group's B and C rows, and A, D, dt_bias, then
    dt <- softplus(dt + dt_bias);  state' = exp(dt A) state + dt x B;  out = (C . state' + D x) silu(z)
and stores state' over the state (the buffers are aliased: the update is in place where XLA can donate) and out.
XLA's fusion of the same step reads the new state a second time for C . state'; at batch 64 of a 780m model the
state is 1.5 MB per row and layer, so that read is most of a decoding step's traffic.

Layouts (the api's, heads axis always present): state (batch, H, P, N); x, z (batch, H, P); dt (batch, H, P) or
(batch, H, 1); A (H, P, N) or (H, 1, 1); B, C (batch, G, N); D, dt_bias (H, P) or (H, 1). Size-1 axes are one value
per head (Mamba-2), read once per program, as mamba-ssm's kernel reads its stride-0 views.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._triton import sigmoid, softplus


@dataclasses.dataclass(frozen=True)
class StepDims:
    batch: int
    nheads: int
    headdim: int  # P
    dstate: int  # N
    ngroups: int
    block_p: int
    block_n: int  # N rounded up to a power of two
    dt_per_head: bool
    a_per_head: bool
    d_per_head: bool
    bias_per_head: bool
    has_d: bool
    has_z: bool
    has_bias: bool
    softplus: bool
    interpret: bool


def _kernel(*refs, dims: StepDims):
    state_ref, x_ref, dt_ref, a_ref, b_ref, c_ref = refs[:6]
    rest = list(refs[6:])
    d_ref = rest.pop(0) if dims.has_d else None
    z_ref = rest.pop(0) if dims.has_z else None
    bias_ref = rest.pop(0) if dims.has_bias else None
    out_ref, new_ref = rest
    b, h = pl.program_id(0), pl.program_id(1)
    p0 = pl.program_id(2) * dims.block_p
    pmask = p0 + jnp.arange(dims.block_p) < dims.headdim
    nmask = jnp.arange(dims.block_n) < dims.dstate
    tile = pmask[:, None] & nmask[None, :]
    group = h // (dims.nheads // dims.ngroups)
    f32 = jnp.float32

    def per_dim(ref, index, per_head: bool):
        """(block_p,) float32 of a per-head-dim vector, or its head's one value broadcast."""
        if per_head:
            return plgpu.load(ref.at[(*index, pl.ds(0, 1))]).astype(f32)
        return plgpu.load(ref.at[(*index, pl.ds(p0, dims.block_p))], mask=pmask, other=0).astype(f32)

    state = plgpu.load(state_ref.at[b, h, pl.ds(p0, dims.block_p), pl.ds(0, dims.block_n)], mask=tile, other=0)
    x = per_dim(x_ref, (b, h), False)
    dt = per_dim(dt_ref, (b, h), dims.dt_per_head)
    if dims.has_bias:
        dt = dt + per_dim(bias_ref, (h,), dims.bias_per_head)
    if dims.softplus:
        dt = softplus(dt, dims.interpret)
    if dims.a_per_head:
        a = plgpu.load(a_ref.at[h, pl.ds(0, 1), pl.ds(0, 1)]).astype(f32)
    else:
        a = plgpu.load(a_ref.at[h, pl.ds(p0, dims.block_p), pl.ds(0, dims.block_n)], mask=tile, other=0).astype(f32)
    bvec = plgpu.load(b_ref.at[b, group, pl.ds(0, dims.block_n)], mask=nmask, other=0).astype(f32)
    cvec = plgpu.load(c_ref.at[b, group, pl.ds(0, dims.block_n)], mask=nmask, other=0).astype(f32)
    new = state.astype(f32) * jnp.exp(dt[:, None] * a) + (dt * x)[:, None] * bvec[None, :]
    out = jnp.sum(new * cvec[None, :], axis=1)
    if dims.has_d:
        out = out + per_dim(d_ref, (h,), dims.d_per_head) * x
    if dims.has_z:
        z = per_dim(z_ref, (b, h), False)
        out = out * z * sigmoid(z, dims.interpret)
    plgpu.store(new_ref.at[b, h, pl.ds(p0, dims.block_p), pl.ds(0, dims.block_n)], new.astype(new_ref.dtype), mask=tile)
    plgpu.store(out_ref.at[b, h, pl.ds(p0, dims.block_p)], out.astype(out_ref.dtype), mask=pmask)


def state_update_step(state, x, dt, A, B, C, D, z, dt_bias, dims: StepDims, num_warps: int):
    """(out (batch, H, P) in x.dtype, new state like state); the new state's buffer is the state's (aliased)."""
    optional = [v for v in (D, z, dt_bias) if v is not None]
    return pl.pallas_call(
        functools.partial(_kernel, dims=dims),
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(state.shape, state.dtype)),
        grid=(dims.batch, dims.nheads, pl.cdiv(dims.headdim, dims.block_p)),
        input_output_aliases={0: 1},
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
        name="selective_state_update",
    )(state, x, dt, A, B, C, *optional)
