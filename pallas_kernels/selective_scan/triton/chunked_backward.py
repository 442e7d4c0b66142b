"""Backward Pallas kernel of the selective scan, chunked design: every chunk in parallel, both recurrences as scans.

Grid (batch, G, chunks of ``bwd_rows`` steps). A program owns one chunk of one batch row and group and walks every
channel block of the group. Per block it recomputes the chunk's states from the state the forward saved at the
chunk start (one forward scan), and the adjoint g_t = dL/dh_t from the adjoint right after the chunk
(``state_passing.chunk_end_adjoints``) by a reverse scan,
    g_t = C_t dy_t + exp(dt_{t+1} A) g_{t+1},
whose decays come from dt loaded one step later (a register tile cannot be shifted along time).
With the drive x_t = B_t dt_t u_t and h_t - x_t = exp(dt_t A) h_{t-1}:
    du_t = dt_t sum_n g_t B_t + D dy_t,    ddt_t = u_t sum_n g_t B_t + sum_n A g_t (h_t - x_t)
    dA  += g_t (h_t - x_t) dt_t,   dB_t = sum_d g_t dt_t u_t,   dC_t = sum_d dy_t h_t
dB and dC sum over every channel of the group inside the program (accumulated across blocks, reduced once), so
they are written once, in float32, without partials or atomics. dA, dD and d bias are written per chunk and
summed by the caller in a fixed order: deterministic.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._linear_scan import linear_scan
from pallas_kernels._triton import LN_2
from pallas_kernels.selective_scan.dims import ScanDims
from pallas_kernels.selective_scan.layout import a2_transposed
from pallas_kernels.selective_scan.triton.chunk_tiles import ChunkLoader, decays, readout, states
from pallas_kernels.selective_scan.triton.sequential_backward import silu_parts
from pallas_kernels.selective_scan.triton.tiles import Tile, optional_refs


def _bwd_kernel(u_ref, delta_ref, A2_ref, B_ref, C_ref, states_ref, after_ref, dout_ref, *refs, dims: ScanDims):
    (D_ref, z_ref, bias_ref), outs = optional_refs(refs, (dims.has_D, dims.has_z, dims.has_bias))
    du_ref, ddelta_ref, dB_ref, dC_ref, dA_ref, *rest = outs
    (dz_ref, dD_ref, dbias_ref), _ = optional_refs(rest, (dims.has_z, dims.has_D, dims.has_bias))
    c = pl.program_id(2)
    t0 = c * dims.chunk
    group_tile = Tile(dims, block=0)
    group_loader = ChunkLoader(group_tile, None)
    B = group_loader.state_tile(B_ref, t0)
    C = group_loader.state_tile(C_ref, t0)

    def block(j, sums):
        dB_sum, dC_sum = sums
        tile = Tile(dims, block=j, batch_group=(group_tile.b, group_tile.g))
        A2 = tile.load_tile(A2_ref)
        Dv = tile.load_vector(D_ref) if D_ref is not None else None
        loader = ChunkLoader(tile, tile.load_vector(bias_ref) if bias_ref is not None else None)
        x = loader.load(t0, u_ref, delta_ref, None, None, z_ref, dout_ref, grad=True)
        x.B, x.C = B, C
        hs, drive = states(x, decays(x.dt, A2, dims.interpret), tile.load_tile(states_ref, tile.b, c))
        dy = x.dout
        if x.z is not None:
            gate, gate_grad = silu_parts(x.z, dims.interpret)
            loader.store_channels(dz_ref, t0, x.dout * readout(hs, x, Dv) * gate_grad)
            dy = x.dout * gate
        dt_next, _ = loader.dt(delta_ref, t0 + 1)
        carried, g_local = linear_scan(
            decays(dt_next, A2, dims.interpret), C[:, :, None] * dy[:, None, :], axis=0, reverse=True
        )
        g = g_local + carried * tile.load_tile(after_ref, tile.b, c)[None]
        gB = jnp.sum(g * B[:, :, None], axis=1)
        before_first = (t0 + loader.rows == 0)[:, None, None]  # h_{-1} = 0 exactly, not h_0 - x_0 rounded
        da = jnp.where(before_first, 0.0, g * (hs - drive))
        du = x.dt * gB
        if Dv is not None:
            du = du + dy * Dv[None, :]
            plgpu.store(dD_ref.at[tile.b, c, tile.channels()], jnp.sum(dy * x.u, axis=0), mask=tile.cmask)
        ddt = x.u * gB + jnp.sum(da * (A2 * LN_2)[None], axis=1)
        if x.dt_grad_scale is not None:
            ddt = ddt * x.dt_grad_scale
        ddt = jnp.where(x.mask, ddt, 0.0)
        loader.store_channels(du_ref, t0, du)
        loader.store_channels(ddelta_ref, t0, ddt)
        if dbias_ref is not None:
            plgpu.store(dbias_ref.at[tile.b, c, tile.channels()], jnp.sum(ddt, axis=0), mask=tile.cmask)
        tile.store_tile(dA_ref, jnp.sum(da * x.dt[:, None, :], axis=0), tile.b, c)
        return dB_sum + g * (x.dt * x.u)[:, None, :], dC_sum + hs * dy[:, None, :]

    zeros = jnp.zeros((dims.chunk, dims.np_, dims.block_d), jnp.float32)
    dB_sum, dC_sum = jax.lax.fori_loop(0, dims.nblocks, block, (zeros, zeros))
    group_loader.store_states(dB_ref, t0, jnp.sum(dB_sum, axis=2))
    group_loader.store_states(dC_ref, t0, jnp.sum(dC_sum, axis=2))


def scan_backward_chunked(u, delta, A, B, C, D, z, delta_bias, states, after, dout, dims: ScanDims, num_warps):
    """Gradients of (u, delta, A, B, C, D, z, delta_bias) from the forward's states every ``bwd_rows`` steps and
    the adjoint after every chunk, both (batch, nchunks, N, dim + 1) float32.

    Returns du, ddelta, dz in their inputs' dtypes, dB and dC (batch, L, G, N) float32, and float32 per-chunk
    partials dA (batch, nchunks, N, dim), dD and d delta_bias (batch, nchunks, dim); None for absent inputs."""
    f32 = jnp.float32
    batch, seqlen, dim = u.shape
    inputs = [u, delta, a2_transposed(A), B, C, states, after, dout] + [x for x in (D, z, delta_bias) if x is not None]
    per_chunk = (batch, dims.nchunks)
    shapes = [
        jax.ShapeDtypeStruct(u.shape, u.dtype),
        jax.ShapeDtypeStruct(delta.shape, delta.dtype),
        jax.ShapeDtypeStruct((batch, seqlen, dims.groups, dims.dstate), f32),
        jax.ShapeDtypeStruct((batch, seqlen, dims.groups, dims.dstate), f32),
        jax.ShapeDtypeStruct((*per_chunk, dims.dstate, dim + 1), f32),
    ]
    if z is not None:
        shapes.append(jax.ShapeDtypeStruct(z.shape, z.dtype))
    shapes += [jax.ShapeDtypeStruct((*per_chunk, dim), f32) for x in (D, delta_bias) if x is not None]
    results = pl.pallas_call(
        functools.partial(_bwd_kernel, dims=dims),
        out_shape=shapes,
        grid=(batch, dims.groups, dims.nchunks),
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
        name="selective_scan_bwd_chunked",
    )(*inputs)
    du, ddelta, dB, dC, dA, *rest = results
    (dz, dD, dbias), _ = optional_refs(rest, (z is not None, D is not None, delta_bias is not None))
    return du, ddelta, dz, dB, dC, dA[..., :dim], dD, dbias
