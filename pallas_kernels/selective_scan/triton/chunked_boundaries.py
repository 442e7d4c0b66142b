"""The chunked design's first passes: what each stretch of time does to the state (forward) and to the adjoint
(backward) on its own, so that the stretches can then run in parallel from their true boundary values.

- ``segment_end_states``: per forward segment (all but the last), the state at its end scanned from zero, and the
  sum of its dt; the segment maps a start state h to decay * h + end, decay = exp(A sum dt).
- ``chunk_start_adjoints``: per backward chunk (all but the first), the adjoint at its first step scanned back from
  zero, and the sum of dt one step later (the decays the adjoint recurrence applies); the chunk maps the adjoint
  after it, g, to decay * g + start.
``state_passing`` combines them into every boundary's true value.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._linear_scan import linear_scan
from pallas_kernels.selective_scan.dims import ScanDims
from pallas_kernels.selective_scan.layout import a2_transposed
from pallas_kernels.selective_scan.triton.chunk_tiles import ChunkLoader, decays, row, states
from pallas_kernels.selective_scan.triton.chunked_forward import chunks_per_segment, segment_grid
from pallas_kernels.selective_scan.triton.tiles import Tile, optional_refs, silu


def _end_kernel(u_ref, delta_ref, A2_ref, B_ref, *refs, dims: ScanDims):
    (bias_ref,), (end_ref, sum_ref) = optional_refs(refs, (dims.has_bias,))
    tile = Tile(dims)
    segment = pl.program_id(3)
    A2 = tile.load_tile(A2_ref)
    loader = ChunkLoader(tile, tile.load_vector(bias_ref) if bias_ref is not None else None)

    def chunk(c, carry):
        h, dt_sum = carry
        x = loader.load(segment * dims.segment_len + c * dims.chunk, u_ref, delta_ref, B_ref)
        hs, _ = states(x, decays(x.dt, A2, dims.interpret), h)
        return row(hs, dims.chunk - 1), dt_sum + jnp.sum(x.dt, axis=0)

    init = (jnp.zeros((dims.np_, dims.block_d), jnp.float32), jnp.zeros((dims.block_d,), jnp.float32))
    h, dt_sum = jax.lax.fori_loop(0, chunks_per_segment(dims), chunk, init)
    tile.store_tile(end_ref, h, tile.b, segment)
    plgpu.store(sum_ref.at[tile.b, segment, tile.channels()], dt_sum, mask=tile.cmask)


def segment_end_states(u, delta, A, B, delta_bias, dims: ScanDims, num_warps: int):
    """(end (batch, nsegments - 1, N, dim + 1), dt sums (batch, nsegments - 1, dim)), float32."""
    inputs = [u, delta, a2_transposed(A), B] + ([delta_bias] if delta_bias is not None else [])
    return _per_stretch_call(_end_kernel, inputs, dims.nsegments - 1, dims, num_warps, "selective_scan_segment_ends")


def _per_stretch_call(kernel, inputs, count: int, dims: ScanDims, num_warps: int, name: str):
    """One program per (batch, group, channel block, stretch); outputs each stretch's local boundary value
    (batch, count, N, dim + 1) and dt sum (batch, count, dim), float32."""
    return pl.pallas_call(
        functools.partial(kernel, dims=dims),
        out_shape=[
            jax.ShapeDtypeStruct((dims.batch, count, dims.dstate, dims.dim + 1), jnp.float32),
            jax.ShapeDtypeStruct((dims.batch, count, dims.dim), jnp.float32),
        ],
        grid=segment_grid(dims, count),
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
        name=name,
    )(*inputs)


def _start_kernel(delta_ref, A2_ref, C_ref, dout_ref, *refs, dims: ScanDims):
    (z_ref, bias_ref), (start_ref, sum_ref) = optional_refs(refs, (dims.has_z, dims.has_bias))
    tile = Tile(dims)
    c = pl.program_id(3) + 1  # chunk 0's start adjoint is never needed
    t0 = c * dims.chunk
    A2 = tile.load_tile(A2_ref)
    loader = ChunkLoader(tile, tile.load_vector(bias_ref) if bias_ref is not None else None)
    x = loader.load(t0, None, delta_ref, None, C_ref, z_ref, dout_ref)
    dy = x.dout if x.z is None else x.dout * silu(x.z, dims.interpret)
    dt_next, _ = loader.dt(delta_ref, t0 + 1)
    _, g = linear_scan(decays(dt_next, A2, dims.interpret), x.C[:, :, None] * dy[:, None, :], axis=0, reverse=True)
    tile.store_tile(start_ref, row(g, 0), tile.b, c - 1)
    plgpu.store(sum_ref.at[tile.b, c - 1, tile.channels()], jnp.sum(dt_next, axis=0), mask=tile.cmask)


def chunk_start_adjoints(delta, A, C, dout, z, delta_bias, dims: ScanDims, num_warps: int):
    """(start (batch, nchunks - 1, N, dim + 1), next-step dt sums (batch, nchunks - 1, dim)) for chunks 1.., f32."""
    inputs = [delta, a2_transposed(A), C, dout] + [x for x in (z, delta_bias) if x is not None]
    return _per_stretch_call(_start_kernel, inputs, dims.nchunks - 1, dims, num_warps, "selective_scan_chunk_adjoints")
