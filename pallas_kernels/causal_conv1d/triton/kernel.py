"""Pallas kernels of the depthwise causal conv1d (channels last), forward and backward, with the SiLU fused.

Grid (batch, blocks of ``block_l`` steps, blocks of ``block_d`` channels). A program reads its (block_l, block_d)
tile of x at the ``width`` shifted offsets its taps need (neighbouring tiles overlap, so all but the first read
come from cache) and writes its tile of out:
    p[t] = bias + sum_k w[k] x[t - (width - 1) + k],   out[t] = silu(p[t]) (or p[t]),
a tap reading the initial states before the start (0 without them) and 0 where ``seq_idx`` differs from the output
step's. The backward recomputes p at the ``width`` output steps each input step feeds (t .. t + width - 1), so it
stores nothing from the forward:
    g[t] = dout[t] silu'(p[t]),   dx[t] = sum_k w[k] g[t + (width - 1) - k],
    dw[k] = sum_t g[t] x[t - (width - 1) + k],   dbias = sum_t g[t]
dw and dbias are written per (batch row, block of steps) and summed by the caller in a fixed order.
Layouts: x, out, dout, dx (batch, L, dim); weight transposed to (width, dim); seq_idx (batch, L) int32; initial
states (batch, width - 1, dim), zero-padded behind to width - 1 + block_l rows (``_initial``) so that a tile's
shifted slice of them stays in bounds in interpret mode. Their gradient is not the kernels' (see ``pallas``).
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._triton import sigmoid


@dataclasses.dataclass(frozen=True)
class ConvDims:
    batch: int
    seqlen: int
    dim: int
    width: int
    has_bias: bool
    has_seq_idx: bool
    has_initial: bool
    silu: bool
    block_l: int
    block_d: int
    interpret: bool

    @property
    def pad(self) -> int:
        """Rows in front of step 0 in the time-major operands: none on the GPU, where a masked load starting before
        row 0 touches no memory; width - 1 zero rows in interpret mode, which reads such a slice as NaN."""
        return self.width - 1 if self.interpret else 0

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.batch, pl.cdiv(self.seqlen, self.block_l), pl.cdiv(self.dim, self.block_d))


class _Tile:
    """One program's rows t0 + [0, block_l) and channels d0 + [0, block_d) of batch row b; loads at a shift."""

    def __init__(self, dims: ConvDims):
        self.dims = dims
        self.b = pl.program_id(0)
        self.t0 = pl.program_id(1) * dims.block_l
        self.d0 = pl.program_id(2) * dims.block_d
        self.rows = self.t0 + jnp.arange(dims.block_l)
        self.cmask = self.d0 + jnp.arange(dims.block_d) < dims.dim

    def row_mask(self, shift: int) -> jax.Array:
        t = self.rows + shift
        return (t >= 0) & (t < self.dims.seqlen)

    def load(self, ref, shift: int, initial_ref=None) -> jax.Array:
        """(block_l, block_d) float32 of a (batch, pad + L, dim) ref at rows + shift; 0 outside [0, L), except the
        width - 1 rows before 0, which come from ``initial_ref`` where given."""
        idx = (self.b, pl.ds(self.dims.pad + self.t0 + shift, self.dims.block_l), pl.ds(self.d0, self.dims.block_d))
        mask = self.row_mask(shift)[:, None] & self.cmask[None, :]
        values = plgpu.load(ref.at[idx], mask=mask, other=0).astype(jnp.float32)
        if initial_ref is None:
            return values
        t = self.rows + shift
        before = (t < 0) & (t >= 1 - self.dims.width)
        idx = (
            self.b,
            pl.ds(self.t0 + shift + self.dims.width - 1, self.dims.block_l),
            pl.ds(self.d0, self.dims.block_d),
        )
        initial = plgpu.load(initial_ref.at[idx], mask=before[:, None] & self.cmask[None, :], other=0)
        return values + initial.astype(jnp.float32)

    def load_seq(self, ref, shift: int) -> jax.Array:
        """(block_l,) seq_idx at rows + shift of a (batch, pad + L) ref; -1 outside [0, L) (no sequence)."""
        idx = (self.b, pl.ds(self.dims.pad + self.t0 + shift, self.dims.block_l))
        return plgpu.load(ref.at[idx], mask=self.row_mask(shift), other=-1)

    def weight(self, ref, k: int) -> jax.Array:
        """(block_d,) float32 of row k of a (rows, dim) ref (k traced: interpret mode takes no Python int index)."""
        idx = (k + 0 * self.b, pl.ds(self.d0, self.dims.block_d))
        return plgpu.load(ref.at[idx], mask=self.cmask, other=0).astype(jnp.float32)

    def store(self, ref, x) -> None:
        """Store rows [t0, t0 + block_l) of an unpadded (batch, L, dim) ref."""
        idx = (self.b, pl.ds(self.t0, self.dims.block_l), pl.ds(self.d0, self.dims.block_d))
        plgpu.store(ref.at[idx], x.astype(ref.dtype), mask=self.row_mask(0)[:, None] & self.cmask[None, :])


def _pre_activation(tile: _Tile, x_ref, weights, bias, seq_ref, initial_ref, shift: int, cache: dict):
    """p at rows + shift and the taps it read, (block_l, block_d) float32 each; ``cache`` keeps loads by offset."""
    dims = tile.dims
    seq_out = _cached(cache, ("seq", shift), lambda: tile.load_seq(seq_ref, shift)) if seq_ref is not None else None
    p = (
        jnp.zeros((dims.block_l, dims.block_d), jnp.float32)
        if bias is None
        else jnp.broadcast_to(bias, (dims.block_l, dims.block_d))
    )
    taps = []
    for k in range(dims.width):
        offset = shift + k - (dims.width - 1)
        tap = _cached(cache, ("x", offset), lambda o=offset: tile.load(x_ref, o, initial_ref))
        if seq_out is not None:
            seq_in = _cached(cache, ("seq", offset), lambda o=offset: tile.load_seq(seq_ref, o))
            tap = jnp.where((seq_in == seq_out)[:, None], tap, 0.0)
        taps.append(tap)
        p = p + tap * weights[k][None, :]
    return p, taps


def _cached(cache: dict, key, load):
    if key not in cache:
        cache[key] = load()
    return cache[key]


def _fwd_kernel(x_ref, w_ref, *refs, dims: ConvDims):
    it = iter(refs)
    bias_ref = next(it) if dims.has_bias else None
    seq_ref = next(it) if dims.has_seq_idx else None
    initial_ref = next(it) if dims.has_initial else None
    (out_ref,) = it
    tile = _Tile(dims)
    weights = [tile.weight(w_ref, k) for k in range(dims.width)]
    bias = tile.weight(bias_ref, 0) if bias_ref is not None else None
    p, _ = _pre_activation(tile, x_ref, weights, bias, seq_ref, initial_ref, 0, {})
    tile.store(out_ref, p * sigmoid(p, dims.interpret) if dims.silu else p)


def _bwd_kernel(x_ref, w_ref, dout_ref, *refs, dims: ConvDims):
    it = iter(refs)
    bias_ref = next(it) if dims.has_bias else None
    seq_ref = next(it) if dims.has_seq_idx else None
    initial_ref = next(it) if dims.has_initial else None
    dx_ref, dw_ref, *dbias_ref = it
    tile = _Tile(dims)
    weights = [tile.weight(w_ref, k) for k in range(dims.width)]
    bias = tile.weight(bias_ref, 0) if bias_ref is not None else None
    cache: dict = {}
    dx = jnp.zeros((dims.block_l, dims.block_d), jnp.float32)
    for shift in range(dims.width):  # the output step t + shift reads x[t] through tap width - 1 - shift
        p, taps = _pre_activation(tile, x_ref, weights, bias, seq_ref, initial_ref, shift, cache)
        g = tile.load(dout_ref, shift)
        if dims.silu:
            sig = sigmoid(p, dims.interpret)
            g = g * sig * (1.0 + p * (1.0 - sig))
        if shift == 0:  # this program's own output steps: the parameter gradients
            for k, tap in enumerate(taps):
                row = jnp.sum(g * tap, axis=0)
                idx = (tile.b, pl.program_id(1), k + 0 * tile.b, pl.ds(tile.d0, dims.block_d))
                plgpu.store(dw_ref.at[idx], row, mask=tile.cmask)
            if dbias_ref:
                idx = (tile.b, pl.program_id(1), pl.ds(tile.d0, dims.block_d))
                plgpu.store(dbias_ref[0].at[idx], jnp.sum(g, axis=0), mask=tile.cmask)
        contribution = g * weights[dims.width - 1 - shift][None, :]
        if seq_ref is not None:  # x[t] feeds output t + shift only within its own sequence
            same = cache[("seq", 0)] == cache[("seq", shift)]
            contribution = jnp.where(same[:, None], contribution, 0.0)
        dx = dx + contribution
    tile.store(dx_ref, dx)


def _params(dims: ConvDims, num_warps: int):
    return dict(
        grid=dims.grid,
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
    )


def _padded(x, dims: ConvDims, value=0):
    """x with ``dims.pad`` rows of ``value`` in front of step 0 (axis 1)."""
    if not dims.pad:
        return x
    return jnp.pad(x, [(0, 0), (dims.pad, 0)] + [(0, 0)] * (x.ndim - 2), constant_values=value)


def _initial(initial_states, dims: ConvDims):
    """The initial states (batch, width - 1, dim) with block_l zero rows behind them."""
    return jnp.pad(initial_states, [(0, 0), (0, dims.block_l), (0, 0)])


def _inputs(x, weight, bias, seq_idx, initial_states, dims: ConvDims):
    """x, weight transposed (width, dim), bias as (1, dim), seq_idx int32, the padded initial states: the kernels'
    operand list."""
    inputs = [_padded(x, dims), weight.T]
    if bias is not None:
        inputs.append(bias[None, :])
    if seq_idx is not None:
        inputs.append(_padded(seq_idx.astype(jnp.int32), dims, -1))
    if initial_states is not None:
        inputs.append(_initial(initial_states, dims))
    return inputs


def conv_forward(x, weight, bias, seq_idx, initial_states, dims: ConvDims, num_warps: int) -> jax.Array:
    """out (batch, L, dim) in x.dtype."""
    return pl.pallas_call(
        functools.partial(_fwd_kernel, dims=dims),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        name="causal_conv1d_fwd",
        **_params(dims, num_warps),
    )(*_inputs(x, weight, bias, seq_idx, initial_states, dims))


def conv_backward(x, weight, bias, seq_idx, initial_states, dout, dims: ConvDims, num_warps: int):
    """(dx (batch, L, dim) in x.dtype, dw partials (batch, L blocks, width, dim) f32, dbias partials
    (batch, L blocks, dim) f32 or None)."""
    blocks = dims.grid[1]
    shapes = [
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct((dims.batch, blocks, dims.width, dims.dim), jnp.float32),
    ]
    if bias is not None:
        shapes.append(jax.ShapeDtypeStruct((dims.batch, blocks, dims.dim), jnp.float32))
    inputs = _inputs(x, weight, bias, seq_idx, initial_states, dims)
    results = pl.pallas_call(
        functools.partial(_bwd_kernel, dims=dims),
        out_shape=shapes,
        name="causal_conv1d_bwd",
        **_params(dims, num_warps),
    )(inputs[0], inputs[1], _padded(dout, dims), *inputs[2:])
    return results[0], results[1], (results[2] if bias is not None else None)
