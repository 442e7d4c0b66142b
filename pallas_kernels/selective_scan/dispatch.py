"""Which kernels run each pass of the Pallas selective scan, forward and backward, for a config: the sequential or
the chunked design (``ScanConfig.design``, ``ScanConfig.bwd_design``), the chunked design's boundary passes, and
the backward's rebuild of the states the forward did not keep. The kernels are Triton ones (``triton/``) but for
the opt-in Mosaic GPU forward and backward (``mosaic_gpu/``, ``ScanConfig.fwd_backend`` and ``bwd_backend``); their
modules hold only the kernels and their launches.

The forward: the chunked design first finds every segment's start state (``triton.chunked_boundaries`` per
segment, composed by ``state_passing``) where L is split into segments, then scans all segments at once
(``triton.chunked_forward``); the sequential design walks L in one program per channel block
(``triton.sequential_forward``).
The backward: the chunked design first finds the adjoint after every chunk the same way, then runs every chunk at
once (``triton.chunked_backward``); the sequential design walks L backward (``triton.sequential_backward``) and sums
its per-channel-block dB and dC partials (``triton.block_sums``); the Mosaic GPU backward walks L backward in
blocks of ``chunk`` steps, and its per-128-channel partials are few enough for XLA's sum.
"""

import dataclasses

import jax
import jax.numpy as jnp

from pallas_kernels._triton import gpu_has_wgmma, gpu_sm_count
from pallas_kernels.selective_scan.dims import ScanDims, scan_dims
from pallas_kernels.selective_scan.heuristics import mosaic_backward_resident, mosaic_segments
from pallas_kernels.selective_scan.layout import a2_transposed, padded_rows
from pallas_kernels.selective_scan.mosaic_gpu import sequential_backward as mosaic_backward
from pallas_kernels.selective_scan.mosaic_gpu import sequential_forward as mosaic_forward
from pallas_kernels.selective_scan.mosaic_gpu.common import (
    KEEP_LANES,
    LANES,
    TMA_SLOT_BYTES,
    MosaicScanDims,
    segment_length,
)
from pallas_kernels.selective_scan.mosaic_gpu.segment_adjoints import segment_adjoints
from pallas_kernels.selective_scan.state_passing import chunk_end_adjoints, segment_start_states
from pallas_kernels.selective_scan.triton.block_sums import sum_block_partials
from pallas_kernels.selective_scan.triton.chunked_backward import scan_backward_chunked
from pallas_kernels.selective_scan.triton.chunked_boundaries import chunk_start_adjoints, segment_end_states
from pallas_kernels.selective_scan.triton.chunked_forward import rebuild_states, scan_forward_chunked
from pallas_kernels.selective_scan.triton.sequential_backward import scan_backward
from pallas_kernels.selective_scan.triton.sequential_forward import scan_forward


def scan_forward_pass(u, delta, A, B, C, D, z, delta_bias, keep, softplus, config, interpret, save_states):
    """Returns out (batch, L, dim) u.dtype, the last state (batch, dim, N) float32 and, when ``save_states``, the
    states every ``config.kept_every`` steps (batch, nkept, N, dim + 1) float32, else None. ``keep``: packed
    sequences' (batch, L) keep mask (``reference.keep_mask``; Mosaic GPU only) or None."""
    if config.fwd_backend == "mosaic_gpu":
        every = config.kept_every
        block = min(mosaic_forward.BLOCK_L, every)
        mdims = _mosaic_dims(u, B, D, z, delta_bias, softplus, config, interpret, block, every, keep)
        a2, (B, C) = a2_transposed(A), _tma_rows(mdims.block_l, B, C)
        starts, keep_rows = None, _tma_keep(keep)
        if mdims.nsegments > 1:
            ends, dt_sums = mosaic_forward.segment_end_states(u, delta, a2, B, delta_bias, keep_rows, mdims)
            flags = _segment_flags(keep, mdims)
            starts = segment_start_states(ends, dt_sums, A, None if flags is None else flags[:, :-1])
        out, last, states = mosaic_forward.scan_forward(
            u, delta, a2, B, C, D, z, delta_bias, starts, keep_rows, mdims, save_states
        )
        return out, jnp.swapaxes(last, 1, 2), states
    _triton_takes(keep)
    dims = scan_dims(u, B, A, D, z, delta_bias, softplus, config, interpret, bwd=False)
    if config.design == "chunked":
        starts = _segment_starts(u, delta, A, B, delta_bias, dims, config.num_warps)
        out, last, states = scan_forward_chunked(
            u, delta, A, B, C, D, z, delta_bias, starts, dims, config.num_warps, save_states
        )
    else:
        out, last, states = scan_forward(u, delta, A, B, C, D, z, delta_bias, dims, config.num_warps, save_states)
    return out, jnp.swapaxes(last, 1, 2), states


def mosaic_refusal(dim: int, groups: int) -> str | None:
    """Why the Mosaic GPU forward and backward cannot take this shape, or None where they can: a program's 128
    channels lie in one group, and the kernels use Hopper's TMA. Any N: B's and C's rows are widened where short
    (``_tma_rows``)."""
    if (dim // groups) % LANES:
        return f"channels per group (dim / G = {dim // groups}) must be a multiple of {LANES}"
    if not gpu_has_wgmma():
        return "the GPU is not a Hopper (compute capability 9.x): use fwd_backend='triton'"
    return None


def _tma_rows(block_l: int, *bc: jax.Array) -> tuple[jax.Array, ...]:
    """B and C as the Mosaic GPU kernels' TMA copies of blocks of ``block_l`` steps take them: as they are where a
    row of N fills a multiple of 16 bytes and a block of rows a multiple of ``TMA_SLOT_BYTES`` (128); else in
    float32, with N padded by zeros to a multiple of 8 where that is still short (the kernels read only the first
    N). A copy 1 / (dim / G) the size of u, made only for those shapes (bf16 N 16 needs none)."""

    def fits(x: jax.Array) -> bool:
        row = x.shape[-1] * x.dtype.itemsize
        return row % 16 == 0 and block_l * row % TMA_SLOT_BYTES == 0

    def taken(x: jax.Array) -> jax.Array:
        if fits(x):
            return x
        x = x.astype(jnp.float32)
        return x if fits(x) else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, -x.shape[-1] % 8)])

    return tuple(taken(x) for x in bc)


def _tma_keep(keep: jax.Array | None) -> jax.Array | None:
    """The packed sequences' (batch, L) float32 keep mask as the Mosaic GPU kernels' TMA copies take it: each
    step's value repeated over KEEP_LANES columns, (batch, L, KEEP_LANES), so that a block of any length fills whole
    128-byte slots (``common.check_tma_slots``)."""
    if keep is None:
        return None
    return jnp.broadcast_to(keep[..., None], (*keep.shape, KEEP_LANES))


def _triton_takes(keep) -> None:
    """The Triton kernels have no packed sequences; the API sends those to Mosaic GPU (``api._check_packed``)."""
    if keep is not None:
        raise ValueError("seq_idx (packed sequences) runs on the Mosaic GPU kernels only")


def _segment_flags(keep, dims: MosaicScanDims):
    """Per segment (batch, segments) float32: 1 where every step continues its predecessor's sequence (the segment
    carries a state through), 0 where a packed sequence starts inside it; None without packed sequences."""
    if keep is None:
        return None
    padded = jnp.pad(keep, [(0, 0), (0, dims.nsegments * dims.segment_len - dims.seqlen)], constant_values=1.0)
    return jnp.prod(padded.reshape(dims.batch, dims.nsegments, dims.segment_len), axis=-1)


def _mosaic_dims(u, B, D, z, delta_bias, softplus, config, interpret, block_l, every, keep=None) -> MosaicScanDims:
    """The Mosaic GPU kernels' problem: blocks of ``block_l`` steps, the state kept before every ``every``-th, L in
    ``config.segments`` segments (0: ``heuristics.mosaic_segments``), packed sequences where ``keep`` is given."""
    batch, seqlen, dim = u.shape
    resident = mosaic_backward_resident(B.shape[3])
    segments = config.segments or mosaic_segments(batch * dim // LANES, seqlen, gpu_sm_count(), resident)
    return MosaicScanDims(
        batch=batch,
        seqlen=seqlen,
        dim=dim,
        groups=B.shape[2],
        dstate=B.shape[3],
        has_D=D is not None,
        has_z=z is not None,
        has_bias=delta_bias is not None,
        softplus=bool(softplus),
        block_l=block_l,
        keep_every=every,
        segment_len=segment_length(seqlen, segments, block_l),
        interpret=interpret,
        has_keep=keep is not None,
    )


def _segment_starts(u, delta, A, B, delta_bias, dims: ScanDims, num_warps):
    """Every forward segment's start state (batch, nsegments, N, dim + 1): the segments' own end states from zero
    (one kernel), composed in order."""
    if dims.nsegments == 1:
        return jnp.zeros((dims.batch, 1, dims.dstate, dims.dim + 1), jnp.float32)
    ends, dt_sums = segment_end_states(u, delta, A, B, delta_bias, dims, num_warps)
    return segment_start_states(ends, dt_sums, A)


def rebuild_saved_states(u, delta, A, B, D, z, delta_bias, keep, softplus, config, interpret, kept):
    """The states every ``config.save_every`` steps (batch, nsaved, N, dim + 1) float32 from those the forward kept
    every ``config.kept_every`` steps: the forward's recurrence rerun without outputs, on the backward's backend
    (Mosaic GPU: every kept interval a segment from its kept state; Triton: the chunked forward's)."""
    if config.bwd_backend == "mosaic_gpu":
        block = config.save_every
        mdims = _mosaic_dims(u, B, D, z, delta_bias, softplus, config, interpret, block, block, keep)
        mdims = dataclasses.replace(mdims, segment_len=config.kept_every)
        (Bt,) = _tma_rows(mdims.block_l, B)
        return mosaic_forward.rebuild_states(u, delta, a2_transposed(A), Bt, delta_bias, kept, _tma_keep(keep), mdims)
    _triton_takes(keep)
    dims = scan_dims(u, B, A, D, z, delta_bias, softplus, config, interpret, bwd=False)
    dims = dataclasses.replace(dims, save_every=config.save_every, segment_len=config.kept_every)
    return rebuild_states(u, delta, A, B, delta_bias, kept, dims, config.num_warps)


def scan_backward_pass(u, delta, A, B, C, D, z, delta_bias, keep, softplus, config, interpret, states, dout, dlast):
    """Gradients from the states every ``config.save_every`` steps (batch, nsaved, N, dim + 1) float32, dout in u's
    dtype and d last_state (batch, N, dim) float32. Returns du, ddelta, dz in their inputs' dtypes, dB and dC
    (batch, L, G, N), dA (dim, N), dD and d delta_bias (dim,) float32; None for absent inputs."""
    if config.bwd_backend == "mosaic_gpu":
        mdims = _mosaic_dims(u, B, D, z, delta_bias, softplus, config, interpret, config.chunk, config.chunk, keep)
        a2, (Bt, Ct), dlast = a2_transposed(A), _tma_rows(mdims.block_l, B, C), padded_rows(dlast)
        carries, keep_rows = dlast[:, None], _tma_keep(keep)
        if mdims.nsegments > 1:
            local, dt_sums = segment_adjoints(delta, a2, Ct, dout, z, delta_bias, keep_rows, mdims)
            flags = _segment_flags(keep, mdims)
            carries = chunk_end_adjoints(local, dt_sums, A, dlast, None if flags is None else flags[:, 1:])
        du, ddelta, dz, dB, dC, dA, dD, dbias = mosaic_backward.scan_backward(
            u, delta, a2, Bt, Ct, D, z, delta_bias, states, dout, carries, keep_rows, mdims
        )
        dB, dC = dB.sum(axis=3), dC.sum(axis=3)  # per-128-channel partials (batch, L, G, dim / G / 128, N)
        per_segment = (0, 1)  # dA, dD, d bias: (batch, segments, ...)
        dD = None if D is None else dD.sum(axis=per_segment)
        dbias = None if delta_bias is None else dbias.sum(axis=per_segment)
        return du, ddelta, dz, dB, dC, dA.sum(axis=per_segment).T, dD, dbias
    _triton_takes(keep)
    dims = scan_dims(u, B, A, D, z, delta_bias, softplus, config, interpret, bwd=True)
    warps = config.bwd_num_warps
    if config.bwd_design == "chunked":
        after = _chunk_adjoints(delta, A, C, dout, z, delta_bias, padded_rows(dlast), dims, warps)
        du, ddelta, dz, dB, dC, dA, dD, dbias = scan_backward_chunked(
            u, delta, A, B, C, D, z, delta_bias, states, after, dout, dims, warps
        )
        summed = (0, 1)  # per-chunk partials of dA, dD, d bias: (batch, chunks, ...)
    else:
        du, ddelta, dz, dB, dC, dA, dD, dbias = scan_backward(
            u, delta, A, B, C, D, z, delta_bias, states, dout, dlast, dims, warps
        )
        dB, dC = sum_block_partials(dB, dC, B.dtype, interpret)  # per-channel-block partials
        summed = (0,)
    dA = dA.sum(axis=summed).T
    dD = None if D is None else dD.sum(axis=summed)
    dbias = None if delta_bias is None else dbias.sum(axis=summed)
    return du, ddelta, dz, dB, dC, dA, dD, dbias


def _chunk_adjoints(delta, A, C, dout, z, delta_bias, dlast, dims: ScanDims, num_warps):
    """The adjoint right after every backward chunk (batch, nchunks, N, dim + 1): the chunks' own start adjoints
    from zero (one kernel), composed last to first from d last_state (batch, N, dim + 1)."""
    if dims.nchunks == 1:
        return dlast[:, None]
    starts, dt_sums = chunk_start_adjoints(delta, A, C, dout, z, delta_bias, dims, num_warps)
    return chunk_end_adjoints(starts, dt_sums, A, dlast)
