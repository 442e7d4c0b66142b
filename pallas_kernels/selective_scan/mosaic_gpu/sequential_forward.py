"""Mosaic GPU forward of the selective scan: out, the last state and the states the backward starts from.

One warpgroup a program: batch row b, 128 channels of one group (one a thread), every step of L. The program keeps
its (N, 128) float32 state in registers, N rows of 128, and walks L one step at a time, each block of ``block_l``
steps of u, delta, z, B and C coming into shared memory by TMA while the block before it computes
(``emit_pipeline``). Per step, with dt = softplus(delta + delta_bias) (or without either):

    h[n] = exp(dt A[n]) h[n] + dt u B[n],   y = sum_n C[n] h[n] + D u,   out = y silu(z)

B[n] and C[n] are one value for all the program's channels. The state before every ``keep_every``-th step is
stored for the backward (``padded_rows`` layout, as the Triton kernels write it), and the last state after L.
Layouts: u, delta, z, out (batch, L, dim); B, C (batch, L, G, N); A2 = A log2(e) as (N, dim + 1) float32; D,
delta_bias (dim,) float32; states (batch, L / keep_every, N, dim + 1) float32.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import call_kernel, sigmoid, store_steps

LANES = 128  # threads of a warpgroup: a program's channels, one a thread
STAGES = 2  # blocks' copies in flight
BLOCK_L = 32  # steps a block (fewer where the states are kept more often)


@dataclasses.dataclass(frozen=True)
class MosaicScanDims:
    batch: int
    seqlen: int
    dim: int
    groups: int
    dstate: int
    has_D: bool
    has_z: bool
    has_bias: bool
    softplus: bool
    block_l: int
    keep_every: int  # steps between the states stored for the backward: a multiple of block_l
    interpret: bool

    @property
    def nblocks(self) -> int:
        return pl.cdiv(self.seqlen, self.block_l)

    @property
    def nkept(self) -> int:
        return pl.cdiv(self.seqlen, self.keep_every)

    @property
    def blocks_per_group(self) -> int:
        return self.dim // self.groups // LANES

    @property
    def row_layout(self):
        return plgpu.Layout.WG_STRIDED((LANES,), vec_size=1)


def softplus(x: jax.Array) -> jax.Array:
    """log(1 + exp(x)) = max(x, 0) + log(1 + exp(-|x|)) = max(x, 0) - log(sigmoid(|x|)): finite for any x."""
    return jnp.maximum(x, 0.0) - jnp.log(sigmoid(jnp.abs(x)))


def _fwd_kernel(u_ref, delta_ref, a2_ref, b_ref, c_ref, *refs, dims: MosaicScanDims, save_states: bool):
    it = iter(refs)
    d_ref = next(it) if dims.has_D else None
    z_ref = next(it) if dims.has_z else None
    bias_ref = next(it) if dims.has_bias else None
    out_ref, last_ref, *rest = it
    states_ref = rest.pop(0) if save_states else None
    (o_s,) = rest
    f32 = jnp.float32
    b, blk = lax.axis_index("batch"), lax.axis_index("channels")
    g = blk // dims.blocks_per_group
    cols = pl.ds(blk * LANES, LANES)

    def row(ref) -> jax.Array:
        return plgpu.load(ref, layout=dims.row_layout, optimized=False).astype(f32)

    a2 = [row(a2_ref.at[n, cols]) for n in range(dims.dstate)]
    dv = row(d_ref.at[cols]) if d_ref is not None else None
    bias = row(bias_ref.at[cols]) if bias_ref is not None else None
    zero = plgpu.layout_cast(jnp.zeros((LANES,), f32), dims.row_layout)
    kept_blocks = dims.keep_every // dims.block_l

    def block_step(indices, u_s, delta_s, b_s, c_s, *tiles_and_carry):
        *z_tiles, h = tiles_and_carry
        (j,) = indices
        plgpu.wait_smem_to_gmem(1, wait_read_only=True)  # the store from this slot two blocks ago has read it
        out_s = o_s.at[j % 2]
        if save_states:

            @pl.when(j % kept_blocks == 0)
            def _():
                for n in range(dims.dstate):
                    states_ref.at[b, j // kept_blocks, n, cols][...] = h[n]

        def step(r, h):
            u = plgpu.load(u_s.at[r], layout=dims.row_layout).astype(f32)
            dt = plgpu.load(delta_s.at[r], layout=dims.row_layout).astype(f32)
            if bias is not None:
                dt = dt + bias
            if dims.softplus:
                dt = softplus(dt)
            dt = dt * ((j * dims.block_l + r) < dims.seqlen).astype(f32)  # steps past L: no decay, no input
            x = dt * u
            y = zero if dv is None else dv * u
            new = []
            for n in range(dims.dstate):
                state = jnp.exp2(dt * a2[n]) * h[n] + x * b_s[r, n].astype(f32)
                y = y + c_s[r, n].astype(f32) * state
                new.append(state)
            if z_tiles:
                zr = plgpu.load(z_tiles[0].at[r], layout=dims.row_layout).astype(f32)
                y = y * zr * sigmoid(zr)
            out_s[r] = y.astype(out_s.dtype)
            return tuple(new)

        h = lax.fori_loop(0, dims.block_l, step, h)
        plgpu.commit_smem()
        store_steps(out_s, lambda steps: out_ref.at[b, steps, cols], j, dims.block_l, dims.seqlen)
        return h

    def channel_spec():
        return plgpu.BlockSpec((dims.block_l, LANES), lambda j: (j, blk))

    state_spec = plgpu.BlockSpec((dims.block_l, dims.dstate), lambda j: (j, 0))
    in_specs = [channel_spec(), channel_spec(), state_spec, state_spec] + (
        [channel_spec()] if z_ref is not None else []
    )
    inputs = [u_ref.at[b], delta_ref.at[b], b_ref.at[b, :, g], c_ref.at[b, :, g]]
    inputs += [z_ref.at[b]] if z_ref is not None else []
    h = plgpu.emit_pipeline(
        block_step,
        grid=(dims.nblocks,),
        in_specs=in_specs,
        max_concurrent_steps=STAGES,
        init_carry=tuple(zero for _ in range(dims.dstate)),
    )(*inputs)
    for n in range(dims.dstate):
        last_ref.at[b, n, cols][...] = h[n]
    plgpu.wait_smem_to_gmem(0)


def scan_forward(u, delta, a2, B, C, D, z, delta_bias, dims: MosaicScanDims, save_states: bool):
    """Returns out (batch, L, dim) u.dtype, the last state (batch, N, dim) float32 and the states before every
    ``keep_every``-th step (batch, L / keep_every, N, dim + 1) float32, or None."""
    inputs = [u, delta, a2, B, C] + [x.astype(jnp.float32) for x in (D, delta_bias) if x is not None]
    if z is not None:
        inputs.insert(5 + (D is not None), z)
    out_type = [
        jax.ShapeDtypeStruct(u.shape, u.dtype),
        jax.ShapeDtypeStruct((dims.batch, dims.dstate, dims.dim + 1), jnp.float32),
    ]
    if save_states:
        out_type.append(jax.ShapeDtypeStruct((dims.batch, dims.nkept, dims.dstate, dims.dim + 1), jnp.float32))
    results = call_kernel(
        functools.partial(_fwd_kernel, dims=dims, save_states=save_states),
        inputs,
        out_type=out_type,
        scratch=[plgpu.SMEM((2, dims.block_l, LANES), u.dtype)],
        grid=(dims.batch, dims.dim // LANES),
        grid_names=("batch", "channels"),
        name="selective_scan_fwd",
        interpret=dims.interpret,
    )
    return results[0], results[1][..., : dims.dim], (results[2] if save_states else None)
