"""Forward Pallas kernel of the selective scan: out, the last state and (for the backward) the chunk states.

Grid (batch, G, channel blocks). Each program keeps its (Np, block_d) float32 state in registers and walks L
once, a chunk of unrolled steps per loop iteration, each step's loads issued ``prefetch`` steps earlier (across
iterations through the loop carry). It stores the state at every chunk start when saving for the backward.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels.selective_scan.dims import ScanDims
from pallas_kernels.selective_scan.layout import a2_transposed
from pallas_kernels.selective_scan.triton.prefetch import Prefetcher, StepRefs
from pallas_kernels.selective_scan.triton.tiles import (
    Tile,
    advance,
    decay,
    optional_refs,
    prepare,
    readout,
    silu,
)

FORWARD_PARTS = ("u", "delta", "B", "C", "z")


def _fwd_kernel(u_ref, delta_ref, A2_ref, B_ref, C_ref, *refs, dims: ScanDims, save_states: bool):
    (D_ref, z_ref, bias_ref), outs = optional_refs(refs, (dims.has_D, dims.has_z, dims.has_bias))
    out_ref, last_ref, *states_ref = outs
    tile = Tile(dims)
    A2 = tile.load_tile(A2_ref)
    Dv = tile.load_vector(D_ref) if D_ref is not None else None
    bias = tile.load_vector(bias_ref) if bias_ref is not None else None
    prefetcher = Prefetcher(tile, StepRefs(u_ref, delta_ref, B_ref, C_ref, z_ref), dims.prefetch)
    order = [(i, FORWARD_PARTS) for i in range(dims.chunk)]

    def chunk(c, carry):
        h, queue = carry
        t0 = c * dims.chunk
        if save_states:
            tile.store_tile(states_ref[0], h, tile.b, c)
        stream = prefetcher.stream(queue, order, t0, order, t0 + dims.chunk)
        for _ in order:
            raw = stream.take()
            step = prepare(tile, raw, bias)
            h = advance(h, step, decay(step, A2, dims.interpret))
            y = readout(h, step, Dv)
            if step.z is not None:
                y = y * silu(step.z, dims.interpret)
            tile.store_channels(out_ref, raw.t, step.valid, y)
        return h, stream.ahead()

    h0 = jnp.zeros((dims.np_, dims.block_d), jnp.float32)
    h, _ = jax.lax.fori_loop(0, dims.nchunks, chunk, (h0, prefetcher.start(order, 0)))
    tile.store_tile(last_ref, h, tile.b)


def scan_forward(u, delta, A, B, C, D, z, delta_bias, dims: ScanDims, num_warps: int, save_states: bool):
    """Returns out (batch, L, dim) u.dtype, last (batch, N, dim) f32 and the chunk-start states (batch, nchunks, N,
    dim + 1) f32 (rows padded, as the backward kernel reads them) or None."""
    inputs = [u, delta, a2_transposed(A), B, C] + [x for x in (D, z, delta_bias) if x is not None]
    out_shapes = [
        jax.ShapeDtypeStruct(u.shape, u.dtype),
        jax.ShapeDtypeStruct((dims.batch, dims.dstate, dims.dim + 1), jnp.float32),
    ]
    if save_states:
        out_shapes.append(jax.ShapeDtypeStruct((dims.batch, dims.nchunks, dims.dstate, dims.dim + 1), jnp.float32))
    kernel = functools.partial(_fwd_kernel, dims=dims, save_states=save_states)
    results = pl.pallas_call(
        kernel,
        out_shape=out_shapes,
        grid=dims.grid,
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
        name="selective_scan_fwd",
    )(*inputs)
    out, last = results[0], results[1][..., : dims.dim]
    return out, last, (results[2] if save_states else None)
