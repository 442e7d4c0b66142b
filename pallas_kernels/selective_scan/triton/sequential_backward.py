"""Backward Pallas kernel of the selective scan: every input gradient from the saved chunk states.

Grid and tiles as the forward. A program walks the chunks last to first, loading each chunk's input tiles (and
its saved start state) one chunk ahead. Per chunk it recomputes, from the saved chunk-start state, the states at
its sub-chunk starts (registers); then per sub-chunk of ``bwd_unroll`` steps, last to first, it recomputes the
states inside and runs the adjoint recurrence back over them:
    g_t = C_t dy_t + exp(dt_{t+1} A) g_{t+1}            (dL/dh_t, g after the last step = d last_state)
    du_t = dt_t sum_n g_t B_t + D dy_t,    ddt_t = u_t sum_n g_t B_t + sum_n g_t h_{t-1} exp(dt_t A) A
    dA  += g_t h_{t-1} exp(dt_t A) dt_t,   dB_t = sum_d g_t dt_t u_t,   dC_t = sum_d dy_t h_t
No (L, dim, N) state is ever stored. Sums over channels that cross programs (dB, dC per step; dA, dD, d bias per
batch row) are written as per-program partials and summed by the caller, in a fixed order: deterministic. The dB
and dC partials are (batch, L, G, nblocks, N): the programs of one step write side by side. Leading with the block
axis instead (each program's steps contiguous) made this kernel 74 -> 127 ms a mamba1-790m step on an H100 (batch 4
x 2048) without speeding up the partials' sum (docs/kernels.md#tried-and-did-not-pay).
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._triton import LN_2, sigmoid
from pallas_kernels.selective_scan.dims import ScanDims
from pallas_kernels.selective_scan.layout import a2_transposed, padded_rows
from pallas_kernels.selective_scan.triton.prefetch import ALL_PARTS, Prefetcher, StepRefs
from pallas_kernels.selective_scan.triton.tiles import (
    Tile,
    advance,
    decay,
    optional_refs,
    prepare,
    readout,
)

RECOMPUTE_PARTS = ("u", "delta", "B")


def silu_parts(z, interpret: bool):
    """silu(z) and its derivative."""
    sig = sigmoid(z, interpret)
    return z * sig, sig * (1.0 + z * (1.0 - sig))


def _bwd_kernel(u_ref, delta_ref, A2_ref, B_ref, C_ref, states_ref, dout_ref, dlast_ref, *refs, dims: ScanDims):
    (D_ref, z_ref, bias_ref), outs = optional_refs(refs, (dims.has_D, dims.has_z, dims.has_bias))
    du_ref, ddelta_ref, dB_ref, dC_ref, dA_ref, *rest = outs
    (dz_ref, dD_ref, dbias_ref), _ = optional_refs(rest, (dims.has_z, dims.has_D, dims.has_bias))
    tile = Tile(dims)
    blk = pl.program_id(2)
    A2 = tile.load_tile(A2_ref)
    A = A2 * LN_2
    Dv = tile.load_vector(D_ref) if D_ref is not None else None
    bias = tile.load_vector(bias_ref) if bias_ref is not None else None
    unroll = dims.bwd_unroll
    prefetcher = Prefetcher(tile, StepRefs(u_ref, delta_ref, B_ref, C_ref, z_ref, dout_ref), dims.prefetch)
    subchunks = dims.chunk // unroll
    # Per chunk, in this order: the forward recompute to the last sub-chunk's start (u, delta, B suffice), then
    # each sub-chunk, last to first, loaded once for its recompute and its reverse pass.
    order = [(i, RECOMPUTE_PARTS) for i in range(dims.chunk - unroll)]
    for s in reversed(range(subchunks)):
        order += [(s * unroll + i, ALL_PARTS) for i in range(unroll)]

    def store_state_sums(ref, t, valid, x):
        idx = (tile.b, t, tile.g, blk, pl.ds(0, dims.np_))
        plgpu.store(ref.at[idx], x, mask=tile.rmask & valid)

    def subchunk_backward(steps, h_start, accs):
        g_next, dA_acc, dD_acc, dbias_acc = accs
        hs, decays = [h_start], []
        for raw, st in steps:
            decays.append(decay(st, A2, dims.interpret))
            hs.append(advance(hs[-1], st, decays[-1]))
            if st.z is not None:
                y = readout(hs[-1], st, Dv)
                tile.store_channels(dz_ref, raw.t, st.valid, st.dout * y * silu_parts(st.z, dims.interpret)[1])
        for i in reversed(range(len(steps))):
            (raw, st), a = steps[i], decays[i]
            dy = st.dout * silu_parts(st.z, dims.interpret)[0] if st.z is not None else st.dout
            g = g_next + st.C[:, None] * dy[None, :]
            gB = jnp.sum(g * st.B[:, None], axis=0)
            da = g * hs[i] * a
            du = st.dt * gB
            if Dv is not None:
                du = du + dy * Dv
                dD_acc = dD_acc + dy * st.u
            ddt = st.u * gB + jnp.sum(da * A, axis=0)
            if st.dt_grad_scale is not None:
                ddt = ddt * st.dt_grad_scale
            ddt = jnp.where(tile.cmask & st.valid, ddt, 0.0)
            dbias_acc = dbias_acc + ddt
            dA_acc = dA_acc + da * st.dt[None, :]
            tile.store_channels(du_ref, raw.t, st.valid, du)
            tile.store_channels(ddelta_ref, raw.t, st.valid, ddt)
            store_state_sums(dB_ref, raw.t, st.valid, jnp.sum(g * (st.dt * st.u)[None, :], axis=1))
            store_state_sums(dC_ref, raw.t, st.valid, jnp.sum(hs[i + 1] * dy[None, :], axis=1))
            g_next = a * g
        return g_next, dA_acc, dD_acc, dbias_acc

    def chunk_state(c):
        return tile.load_tile(states_ref, tile.b, tile.traced(c))

    def chunk_backward(j, carry):
        *accs, h, queue = carry
        c = dims.nchunks - 1 - j
        t_chunk = c * dims.chunk
        h_ahead = chunk_state(jnp.maximum(c - 1, 0))
        stream = prefetcher.stream(queue, order, t_chunk, order, t_chunk - dims.chunk)
        starts = [h]
        for _ in range(subchunks - 1):
            for _ in range(unroll):
                st = prepare(tile, stream.take(), bias)
                h = advance(h, st, decay(st, A2, dims.interpret))
            starts.append(h)
        for s in reversed(range(subchunks)):
            steps = []
            for _ in range(unroll):
                raw = stream.take()
                steps.append((raw, prepare(tile, raw, bias, grad=True)))
            accs = subchunk_backward(steps, starts[s], accs)
        return (*accs, h_ahead, stream.ahead())

    last = dims.nchunks - 1
    zeros_d = jnp.zeros((dims.block_d,), jnp.float32)
    zeros_tile = jnp.zeros((dims.np_, dims.block_d), jnp.float32)
    accs = (tile.load_tile(dlast_ref, tile.b), zeros_tile, zeros_d, zeros_d)
    init = (*accs, chunk_state(last), prefetcher.start(order, last * dims.chunk))
    _, dA_acc, dD_acc, dbias_acc, _, _ = jax.lax.fori_loop(0, dims.nchunks, chunk_backward, init)
    tile.store_tile(dA_ref, dA_acc, tile.b)
    for ref, acc in ((dD_ref, dD_acc), (dbias_ref, dbias_acc)):
        if ref is not None:
            plgpu.store(ref.at[tile.b, tile.channels()], acc, mask=tile.cmask)


def scan_backward(u, delta, A, B, C, D, z, delta_bias, states, dout, dlast, dims: ScanDims, num_warps: int):
    """Gradients of (u, delta, A, B, C, D, z, delta_bias); dlast is (batch, N, dim) float32.

    Returns du, ddelta, dz in their inputs' dtypes and float32 partials: dB, dC (batch, L, G, nblocks, N),
    dA (batch, N, dim), dD and d delta_bias (batch, dim); None for absent inputs.
    """
    f32 = jnp.float32
    batch, seqlen, dim = u.shape
    inputs = [u, delta, a2_transposed(A), B, C, states, dout, padded_rows(dlast)]
    inputs += [x for x in (D, z, delta_bias) if x is not None]
    partial_bc = (batch, seqlen, dims.groups, dims.nblocks, dims.dstate)
    shapes = [
        jax.ShapeDtypeStruct(u.shape, u.dtype),
        jax.ShapeDtypeStruct(delta.shape, delta.dtype),
        jax.ShapeDtypeStruct(partial_bc, f32),
        jax.ShapeDtypeStruct(partial_bc, f32),
        jax.ShapeDtypeStruct((batch, dims.dstate, dim + 1), f32),
    ]
    if z is not None:
        shapes.append(jax.ShapeDtypeStruct(z.shape, z.dtype))
    shapes += [jax.ShapeDtypeStruct((batch, dim), f32) for x in (D, delta_bias) if x is not None]
    results = pl.pallas_call(
        functools.partial(_bwd_kernel, dims=dims),
        out_shape=shapes,
        grid=dims.grid,
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
        name="selective_scan_bwd",
    )(*inputs)
    du, ddelta, dB, dC, dA, *rest = results
    (dz, dD, dbias), _ = optional_refs(rest, (z is not None, D is not None, delta_bias is not None))
    return du, ddelta, dz, dB, dC, dA[..., :dim], dD, dbias
