"""Forward Pallas kernel of the selective scan, chunked design: the recurrence as a parallel scan along time.

Grid (batch, G, channel blocks, segments). A program walks its segment of L in chunks of ``rows`` steps from the
segment's start state (``state_passing.segment_start_states``: zero for the first segment); per chunk it loads the
inputs as tiles, computes every decay exp(dt A) and drive B dt u of the chunk at once, scans them along time
(``linear_scan``), reads every output out and carries the chunk's last state on. When saving for the backward it
stores the state every ``save_every`` steps (at chunk starts, and inside chunks when that is shorter than ``rows``).
The last segment's final state is the last state. The same kernel without outputs rebuilds, in the backward, the
states between those the forward kept (``rebuild_states``: each kept state starts a segment).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels.selective_scan.dims import ScanDims
from pallas_kernels.selective_scan.layout import a2_transposed
from pallas_kernels.selective_scan.triton.chunk_tiles import ChunkLoader, decays, readout, row, states
from pallas_kernels.selective_scan.triton.tiles import Tile, optional_refs, silu


def segment_grid(dims: ScanDims, nsegments: int) -> tuple[int, int, int, int]:
    return (dims.batch, dims.groups, dims.nblocks, nsegments)


def chunks_per_segment(dims: ScanDims) -> int:
    return dims.segment_len // dims.chunk


def _fwd_kernel(u_ref, delta_ref, A2_ref, B_ref, start_ref, *refs, dims: ScanDims, save_states: bool, outputs: bool):
    (C_ref, D_ref, z_ref, bias_ref), outs = optional_refs(refs, (outputs, dims.has_D, dims.has_z, dims.has_bias))
    out_ref, last_ref, *states_ref = outs if outputs else [None, *outs]
    tile = Tile(dims)
    segment = pl.program_id(3)
    A2 = tile.load_tile(A2_ref)
    Dv = tile.load_vector(D_ref) if D_ref is not None else None
    loader = ChunkLoader(tile, tile.load_vector(bias_ref) if bias_ref is not None else None)
    first = segment * dims.segment_len

    def save(t, state):
        saved, offset = jax.lax.div(t, dims.save_every), jax.lax.rem(t, dims.save_every)
        tile.store_tile(states_ref[0], state, tile.b, saved, mask=(offset == 0) & (t < dims.seqlen))

    def chunk(c, h):
        t0 = first + c * dims.chunk
        if save_states:
            save(t0, h)
        x = loader.load(t0, u_ref, delta_ref, B_ref, C_ref, z_ref)
        hs, _ = states(x, decays(x.dt, A2, dims.interpret), h)
        if save_states:  # save points inside the chunk, when the backward's chunk is shorter
            for k in range(1, dims.chunk // dims.save_every):
                save(t0 + k * dims.save_every, row(hs, k * dims.save_every - 1))
        if outputs:
            y = readout(hs, x, Dv)
            if x.z is not None:
                y = y * silu(x.z, dims.interpret)
            loader.store_channels(out_ref, t0, y)
        return row(hs, dims.chunk - 1)  # steps past L have dt = 0 and no drive: the last row is the state at L

    h = jax.lax.fori_loop(0, chunks_per_segment(dims), chunk, tile.load_tile(start_ref, tile.b, segment))
    tile.store_tile(last_ref, h, tile.b, mask=segment == dims.nsegments - 1)


def scan_forward_chunked(u, delta, A, B, C, D, z, delta_bias, starts, dims: ScanDims, num_warps: int, save_states):
    """As ``sequential_forward.scan_forward``, from each segment's start state ``starts``
    (batch, nsegments, N, dim + 1): out (batch, L, dim) u.dtype, last (batch, N, dim) f32 and the states every
    ``save_every`` steps (batch, nsaved, N, dim + 1) f32, or None."""
    out, last, saved = _call(u, delta, A, B, C, D, z, delta_bias, starts, dims, num_warps, save_states, outputs=True)
    return out, last, saved


def rebuild_states(u, delta, A, B, delta_bias, kept, dims: ScanDims, num_warps: int) -> jax.Array:
    """The states every ``dims.save_every`` steps (batch, nsaved, N, dim + 1) f32, rebuilt from the ones kept every
    ``dims.segment_len`` steps (batch, nkept, N, dim + 1): the forward's recurrence rerun per kept stretch, all
    stretches in parallel, without its outputs (C, D and z are not read)."""
    dims = dataclasses.replace(dims, has_D=False, has_z=False)
    _, _, saved = _call(u, delta, A, B, None, None, None, delta_bias, kept, dims, num_warps, True, outputs=False)
    return saved


def _call(u, delta, A, B, C, D, z, delta_bias, starts, dims, num_warps, save_states, outputs):
    optional = (C, D, z, delta_bias) if outputs else (delta_bias,)
    inputs = [u, delta, a2_transposed(A), B, starts] + [x for x in optional if x is not None]
    out_shapes = [jax.ShapeDtypeStruct((dims.batch, dims.dstate, dims.dim + 1), jnp.float32)]
    if outputs:
        out_shapes.insert(0, jax.ShapeDtypeStruct(u.shape, u.dtype))
    if save_states:
        out_shapes.append(jax.ShapeDtypeStruct((dims.batch, dims.nsaved, dims.dstate, dims.dim + 1), jnp.float32))
    results = pl.pallas_call(
        functools.partial(_fwd_kernel, dims=dims, save_states=save_states, outputs=outputs),
        out_shape=out_shapes,
        grid=segment_grid(dims, dims.nsegments),
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
        name="selective_scan_fwd_chunked" if outputs else "selective_scan_bwd_rebuild_states",
    )(*inputs)
    if not outputs:
        results = [None, *results]
    out, last = results[0], results[1][..., : dims.dim]
    return out, last, (results[2] if save_states else None)
