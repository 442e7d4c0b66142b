"""Mosaic GPU kernels of the depthwise causal conv1d (channels last), forward and backward, with the SiLU fused.

One warpgroup a program: batch row b, ``block_d`` channels (``vec`` a thread), one segment of ``segment_blocks``
blocks of ``block_l`` steps. The program walks its segment one step at a time, the input rows its taps need carried
in registers, each block's tiles coming into shared memory by TMA while the block before it computes
(``emit_pipeline``). So every input row is read from memory once, plus width - 1 rows at the segment's edges, and
nothing is recomputed (the Triton kernels read each row at every tap and the backward recomputes p at width steps):

    forward, first step first:  p[t] = bias + sum_k w[k] x[t - (width - 1) + k],   out[t] = silu(p[t]) (or p[t])
    backward, last step first:  g[t] = dout[t] silu'(p[t]),   dx[t] = sum_k w[k] g[t + (width - 1) - k],
                                dw[k] += g[t] x[t - (width - 1) + k],   dbias += g[t]

The backward carries the width - 1 rows of g after t and the width - 1 rows of x before it; the rows before a
block's first width - 1 steps come from a second stream, the 8 rows before the block (``HALO``). Rows before step 0
read the initial states (0 without them); rows from L on read 0 (the TMA copy of a block past L fills them with 0),
and the last block stores only its rows before L. dw and dbias are written per (batch row, segment) and summed by
the caller in a fixed order.
Layouts: x, out, dout, dx (batch, L, dim); weight transposed to (width, dim) float32; bias (dim,) float32;
initial states (batch, width - 1, dim).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import call_kernel, sigmoid, store_steps

LANES = 128  # threads of a warpgroup: a row of block_d channels is spread over them, vec channels each
HALO = 8  # rows of x before a block that the backward's second stream brings: width - 1 <= HALO
STAGES = 2  # blocks' copies in flight


@dataclasses.dataclass(frozen=True)
class MosaicConvDims:
    batch: int
    seqlen: int
    dim: int
    width: int
    has_bias: bool
    has_initial: bool
    silu: bool
    block_l: int
    block_d: int
    segment_blocks: int
    interpret: bool
    unroll: int = 1  # steps a loop iteration: a power of two, at most block_l

    @property
    def nblocks(self) -> int:
        return pl.cdiv(self.seqlen, self.block_l)

    @property
    def segments(self) -> int:
        return pl.cdiv(self.nblocks, self.segment_blocks)

    @property
    def row_layout(self):
        """A row of block_d channels across the warpgroup's threads, vec contiguous channels each."""
        return plgpu.Layout.WG_STRIDED((self.block_d,), vec_size=self.block_d // LANES)


class _Program:
    """This program's batch row, channels and segment of blocks (the last segment may hold fewer: traced)."""

    def __init__(self, dims: MosaicConvDims):
        self.dims = dims
        self.b, self.d, self.s = lax.axis_index("batch"), lax.axis_index("channels"), lax.axis_index("segment")
        self.cols = pl.ds(self.d * dims.block_d, dims.block_d)
        self.first = self.s * dims.segment_blocks
        if dims.nblocks % dims.segment_blocks == 0:
            self.steps = dims.segment_blocks
        else:
            self.steps = jnp.minimum(dims.segment_blocks, dims.nblocks - self.first)

    def row(self, ref) -> jax.Array:
        """A (block_d,) float32 row from global memory (``ref`` indexed down to this program's channels)."""
        return plgpu.load(ref, layout=self.dims.row_layout, optimized=False).astype(jnp.float32)

    def x_row(self, x_ref, initial_ref, t) -> jax.Array:
        """x[t] for any step t >= 1 - width: the initial states' row (0 without them) before step 0, 0 from L on."""
        dims, t = self.dims, jnp.asarray(t)
        inside = self.row(x_ref.at[self.b, jnp.clip(t, 0, dims.seqlen - 1), self.cols])
        inside = inside * (t < dims.seqlen).astype(jnp.float32)
        if initial_ref is None:
            return inside * (t >= 0).astype(jnp.float32)
        before = self.row(initial_ref.at[self.b, jnp.clip(t + dims.width - 1, 0, dims.width - 2), self.cols])
        keep = (t >= 0).astype(jnp.float32)
        return inside * keep + before * (1.0 - keep)

    def zeros(self) -> jax.Array:
        return plgpu.layout_cast(jnp.zeros((self.dims.block_d,), jnp.float32), self.dims.row_layout)


def _pre_activation(taps, bias, xs) -> jax.Array:
    """bias + sum_k w[k] x[t - (width - 1) + k] from xs = (x[t - (width - 1)], ..., x[t])."""
    p = bias
    for w, x in zip(taps, xs, strict=True):
        p = w * x if p is None else p + w * x
    return p


def _activation_grad(p, dout, silu: bool) -> jax.Array:
    """g = dout silu'(p) (dout without the SiLU)."""
    if not silu:
        return dout
    s = sigmoid(p)
    return dout * s * (1.0 + p * (1.0 - s))


def _store_block(o_s, out_ref, prog: _Program, block, step) -> None:
    """The block's output tile (in slot step % 2 of ``o_s``) to its rows of ``out_ref`` (``store_steps``)."""
    plgpu.commit_smem()

    def target(steps):
        return out_ref.at[prog.b, steps, prog.cols]

    store_steps(o_s.at[step % 2], target, block, prog.dims.block_l, prog.dims.seqlen)


def _fwd_kernel(x_ref, w_ref, *refs, dims: MosaicConvDims):
    bias_ref = refs[0] if dims.has_bias else None
    initial_ref = refs[dims.has_bias] if dims.has_initial else None
    out_ref, o_s = refs[dims.has_bias + dims.has_initial :]
    prog = _Program(dims)
    taps = [prog.row(w_ref.at[k, prog.cols]) for k in range(dims.width)]
    bias = prog.row(bias_ref.at[prog.cols]) if bias_ref is not None else None
    start = prog.first * dims.block_l
    before = tuple(prog.x_row(x_ref, initial_ref, start - (dims.width - 1) + i) for i in range(dims.width - 1))

    def block_step(indices, x_s, carry):
        (j,) = indices
        plgpu.wait_smem_to_gmem(1, wait_read_only=True)  # the store from this slot two blocks ago has read it
        out_s = o_s.at[j % 2]

        def step(r, xs):
            xs = (*xs, plgpu.load(x_s.at[r], layout=dims.row_layout).astype(jnp.float32))
            p = _pre_activation(taps, bias, xs)
            out_s[r] = (p * sigmoid(p) if dims.silu else p).astype(out_s.dtype)
            return xs[1:]

        carry = lax.fori_loop(0, dims.block_l, step, carry, unroll=dims.unroll)
        _store_block(o_s, out_ref, prog, prog.first + j, j)
        return carry

    spec = plgpu.BlockSpec((dims.block_l, dims.block_d), lambda j: (prog.first + j, prog.d))
    plgpu.emit_pipeline(
        block_step, grid=(prog.steps,), in_specs=[spec], max_concurrent_steps=STAGES, init_carry=before
    )(x_ref.at[prog.b])
    plgpu.wait_smem_to_gmem(0)


def _bwd_kernel(x_ref, w_ref, dout_ref, *refs, dims: MosaicConvDims):
    bias_ref = refs[0] if dims.has_bias else None
    initial_ref = refs[dims.has_bias] if dims.has_initial else None
    dx_ref, dw_ref, *rest = refs[dims.has_bias + dims.has_initial :]
    dbias_ref = rest.pop(0) if dims.has_bias else None
    (o_s,) = rest
    prog = _Program(dims)
    width, f32 = dims.width, jnp.float32
    taps = [prog.row(w_ref.at[k, prog.cols]) for k in range(width)]
    bias = prog.row(bias_ref.at[prog.cols]) if bias_ref is not None else None
    last = prog.first + prog.steps - 1  # the segment's last block, walked first
    end = (last + 1) * dims.block_l  # the step after the segment

    def g_row(u) -> jax.Array:
        """g[u] from global memory (0 from L on): for the steps after the segment."""
        xs = [prog.x_row(x_ref, initial_ref, u - (width - 1) + k) for k in range(width)]
        dout = prog.row(dout_ref.at[prog.b, jnp.minimum(u, dims.seqlen - 1), prog.cols]) * (u < dims.seqlen).astype(f32)
        return _activation_grad(_pre_activation(taps, bias, xs), dout, dims.silu)

    x_after = tuple(prog.x_row(x_ref, initial_ref, end - (width - 1) + i) for i in range(width - 1))
    g_after = tuple(g_row(end + i) for i in range(width - 1))  # g[end], ..., g[end + width - 2]
    sums = tuple(prog.zeros() for _ in range(width + 1))  # dw[0..width-1], dbias

    def block_step(indices, x_s, halo_s, dout_s, carry):
        (j,) = indices
        block = last - j
        plgpu.wait_smem_to_gmem(1, wait_read_only=True)
        dx_s = o_s.at[j % 2]
        first_block = (block == 0).astype(f32)

        def below(r) -> jax.Array:
            """x[t - (width - 1)] at the block's row r < width - 1: the halo tile's, or before step 0."""
            halo = plgpu.load(halo_s.at[HALO + r - (width - 1)], layout=dims.row_layout).astype(f32)
            if initial_ref is None:
                return halo * (1.0 - first_block)
            start = prog.x_row(x_ref, initial_ref, r - (width - 1))  # block 0: before step 0
            return halo * (1.0 - first_block) + start * first_block

        def step(r, carry, x_first):
            xs_after, gs_after, sums = carry  # x[t - width + 2 .. t], g[t + 1 .. t + width - 1]
            xs = (x_first, *xs_after)
            dout = plgpu.load(dout_s.at[r], layout=dims.row_layout).astype(f32)
            g = _activation_grad(_pre_activation(taps, bias, xs), dout, dims.silu)
            gs = (g, *gs_after)  # g[t .. t + width - 1]
            dx = _pre_activation(taps, None, gs[::-1])
            dx_s[r] = dx.astype(dx_s.dtype)
            sums = (*(acc + g * x for acc, x in zip(sums[:width], xs, strict=True)), sums[width] + g)
            return xs[:-1], gs[:-1], sums

        def upper(i, carry):
            r = dims.block_l - 1 - i
            x_first = plgpu.load(x_s.at[r - (width - 1)], layout=dims.row_layout).astype(f32)
            return step(r, carry, x_first)

        walked = dims.block_l - (width - 1)  # Mosaic GPU unrolls only a loop whose length the unroll divides
        unrolled = walked - walked % dims.unroll
        carry = lax.fori_loop(0, unrolled, upper, carry, unroll=dims.unroll)
        carry = lax.fori_loop(unrolled, walked, upper, carry)
        for r in range(width - 2, -1, -1):
            carry = step(r, carry, below(r))
        _store_block(o_s, dx_ref, prog, block, j)
        return carry

    tile = plgpu.BlockSpec((dims.block_l, dims.block_d), lambda j: (last - j, prog.d))
    halo = plgpu.BlockSpec(
        (HALO, dims.block_d), lambda j: (jnp.maximum((last - j) * (dims.block_l // HALO) - 1, 0), prog.d)
    )
    _, _, sums = plgpu.emit_pipeline(
        block_step,
        grid=(prog.steps,),
        in_specs=[tile, halo, tile],
        max_concurrent_steps=STAGES,
        init_carry=(x_after, g_after, sums),
    )(x_ref.at[prog.b], x_ref.at[prog.b], dout_ref.at[prog.b])
    for k in range(width):
        dw_ref.at[prog.b, prog.s, k, prog.cols][...] = sums[k]
    if dbias_ref is not None:
        dbias_ref.at[prog.b, prog.s, prog.cols][...] = sums[width]
    plgpu.wait_smem_to_gmem(0)


def _inputs(x, weight, bias, initial_states) -> list:
    inputs = [x, weight.T.astype(jnp.float32)]
    inputs += [] if bias is None else [bias.astype(jnp.float32)]
    return inputs + ([] if initial_states is None else [initial_states])


def _grid(dims: MosaicConvDims) -> dict:
    return {
        "grid": (dims.batch, dims.dim // dims.block_d, dims.segments),
        "grid_names": ("batch", "channels", "segment"),
    }


def _tiles(x, dims: MosaicConvDims):
    return plgpu.SMEM((2, dims.block_l, dims.block_d), x.dtype)


def conv_forward(x, weight, bias, initial_states, dims: MosaicConvDims) -> jax.Array:
    """out (batch, L, dim) in x.dtype."""
    return call_kernel(
        functools.partial(_fwd_kernel, dims=dims),
        _inputs(x, weight, bias, initial_states),
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch=[_tiles(x, dims)],
        name="causal_conv1d_fwd",
        interpret=dims.interpret,
        **_grid(dims),
    )


def conv_backward(x, weight, bias, initial_states, dout, dims: MosaicConvDims):
    """(dx (batch, L, dim) in x.dtype, dw partials (batch, segments, width, dim) f32, dbias partials
    (batch, segments, dim) f32 or None)."""
    shapes = [
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct((dims.batch, dims.segments, dims.width, dims.dim), jnp.float32),
    ]
    if bias is not None:
        shapes.append(jax.ShapeDtypeStruct((dims.batch, dims.segments, dims.dim), jnp.float32))
    inputs = _inputs(x, weight, bias, initial_states)
    results = call_kernel(
        functools.partial(_bwd_kernel, dims=dims),
        [inputs[0], inputs[1], dout, *inputs[2:]],
        out_type=shapes,
        scratch=[_tiles(x, dims)],
        name="causal_conv1d_bwd",
        interpret=dims.interpret,
        **_grid(dims),
    )
    return results[0], results[1], (results[2] if bias is not None else None)
