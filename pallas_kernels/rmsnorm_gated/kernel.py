"""Pallas kernels of the gated RMSNorm, forward and backward, over rows of (rows, dim) with contiguous groups.

Grid (row programs, groups). A program owns ``block_rows`` rows (the forward) or a contiguous run of row blocks (the
backward) and one group of ``group`` channels, read in ``chunks`` column tiles of ``block_cols``; with one chunk the
tiles stay in registers, with more the second pass reloads them (groups wider than a tile that fits). Per row,
with g = silu(z) where the gate comes first (else 1) and the group's n channels:
    h = x g,  r = rsqrt(sum(h^2) / n + eps),  o = h r w + b,  out = o silu(z) (gate after) or o.
The backward recomputes r, with do = dout silu(z) (gate after) or dout and s = sum(do w h) over the group:
    dh = r do w - h r^3 s / n,  dx = dh g,  dz = dh x silu'(z) (gate first) or dout o silu'(z) (gate after),
    dw = sum_rows do h r,  db = sum_rows do.
dw and db are written per backward program, (programs, dim) float32, and summed by the caller in a fixed order.
Layouts: x, z, out, dout, dx, dz (rows, dim); weight and bias (1, dim) float32.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._triton import sigmoid


@dataclasses.dataclass(frozen=True)
class NormDims:
    rows: int
    dim: int
    group: int
    has_z: bool
    has_bias: bool
    norm_before_gate: bool
    eps: float
    block_rows: int
    block_cols: int
    bwd_programs: int  # backward: programs along the rows, each a contiguous run of row blocks
    interpret: bool

    @property
    def groups(self) -> int:
        return self.dim // self.group

    @property
    def chunks(self) -> int:
        return pl.cdiv(self.group, self.block_cols)

    @property
    def row_blocks(self) -> int:
        return pl.cdiv(self.rows, self.block_rows)

    @property
    def blocks_per_program(self) -> int:
        return pl.cdiv(self.row_blocks, self.bwd_programs)

    @property
    def gate_first(self) -> bool:
        return self.has_z and not self.norm_before_gate

    @property
    def gate_after(self) -> bool:
        return self.has_z and self.norm_before_gate


class _Tile:
    """Rows r0 + [0, block_rows) and column chunk ``chunk`` of group ``group`` (program ids are read outside loops:
    interpret mode does not substitute them inside a loop body)."""

    def __init__(self, dims: NormDims, group, r0, chunk: int):
        self.dims = dims
        within = chunk * dims.block_cols + jnp.arange(dims.block_cols)
        self.c0 = group * dims.group + chunk * dims.block_cols
        self.cmask = within < dims.group
        self.rmask = r0 + jnp.arange(dims.block_rows) < dims.rows
        self.r0 = r0

    def load(self, ref) -> jax.Array:
        idx = (pl.ds(self.r0, self.dims.block_rows), pl.ds(self.c0, self.dims.block_cols))
        mask = self.rmask[:, None] & self.cmask[None, :]
        return plgpu.load(ref.at[idx], mask=mask, other=0).astype(jnp.float32)

    def param(self, ref) -> jax.Array:
        """(1, block_cols) float32 of a (1, dim) ref."""
        idx = (pl.ds(0, 1), pl.ds(self.c0, self.dims.block_cols))
        return plgpu.load(ref.at[idx], mask=self.cmask[None, :], other=0).astype(jnp.float32)

    def store(self, ref, value) -> None:
        idx = (pl.ds(self.r0, self.dims.block_rows), pl.ds(self.c0, self.dims.block_cols))
        plgpu.store(ref.at[idx], value.astype(ref.dtype), mask=self.rmask[:, None] & self.cmask[None, :])


def _silu_parts(z, interpret: bool):
    """silu(z) and its derivative, float32."""
    sig = sigmoid(z, interpret)
    return z * sig, sig * (1.0 + z * (1.0 - sig))


def _gated_input(dims: NormDims, tile: _Tile, x_ref, z_ref):
    """x, z (None without gate), h = x silu(z) or x: float32 tiles."""
    x = tile.load(x_ref)
    z = tile.load(z_ref) if dims.has_z else None
    h = x * _silu_parts(z, dims.interpret)[0] if dims.gate_first else x
    return x, z, h


def _fwd_kernel(x_ref, z_ref, w_ref, b_ref, out_ref, *, dims: NormDims):
    r0 = pl.program_id(0) * dims.block_rows
    tiles = [_Tile(dims, pl.program_id(1), r0, c) for c in range(dims.chunks)]
    kept = []
    sum_sq = jnp.zeros((dims.block_rows,), jnp.float32)
    for tile in tiles:
        parts = _gated_input(dims, tile, x_ref, z_ref)
        sum_sq = sum_sq + jnp.sum(parts[2] * parts[2], axis=1)
        kept.append(parts if dims.chunks == 1 else None)
    rstd = jax.lax.rsqrt(sum_sq / dims.group + dims.eps)[:, None]
    for tile, parts in zip(tiles, kept, strict=True):
        _, z, h = parts or _gated_input(dims, tile, x_ref, z_ref)
        out = h * rstd * tile.param(w_ref)
        if dims.has_bias:
            out = out + tile.param(b_ref)
        if dims.gate_after:
            out = out * _silu_parts(z, dims.interpret)[0]
        tile.store(out_ref, out)


def _bwd_kernel(x_ref, z_ref, w_ref, b_ref, dout_ref, dx_ref, dz_ref, dw_ref, db_ref, *, dims: NormDims):
    first_block, group = pl.program_id(0) * dims.blocks_per_program, pl.program_id(1)
    weights = [_Tile(dims, group, 0, c).param(w_ref) for c in range(dims.chunks)]
    biases = [_Tile(dims, group, 0, c).param(b_ref) if dims.has_bias else None for c in range(dims.chunks)]

    def row_block(i, sums):
        r0 = (first_block + i) * dims.block_rows
        tiles = [_Tile(dims, group, r0, c) for c in range(dims.chunks)]

        def inputs(c):
            x, z, h = _gated_input(dims, tiles[c], x_ref, z_ref)
            dout = tiles[c].load(dout_ref)
            do = dout * _silu_parts(z, dims.interpret)[0] if dims.gate_after else dout
            return x, z, h, dout, do

        kept = []
        sum_sq = jnp.zeros((dims.block_rows,), jnp.float32)
        sum_dwh = jnp.zeros((dims.block_rows,), jnp.float32)
        for c in range(dims.chunks):
            parts = inputs(c)
            h, do = parts[2], parts[4]
            sum_sq = sum_sq + jnp.sum(h * h, axis=1)
            sum_dwh = sum_dwh + jnp.sum(do * weights[c] * h, axis=1)
            kept.append(parts if dims.chunks == 1 else None)
        rstd = jax.lax.rsqrt(sum_sq / dims.group + dims.eps)[:, None]
        coef = rstd * rstd * rstd * (sum_dwh / dims.group)[:, None]
        new_sums = []
        for c in range(dims.chunks):
            x, z, h, dout, do = kept[c] or inputs(c)
            n = h * rstd
            dh = rstd * do * weights[c] - h * coef
            if dims.gate_first:
                silu_z, dsilu_z = _silu_parts(z, dims.interpret)
                tiles[c].store(dx_ref, dh * silu_z)
                tiles[c].store(dz_ref, dh * x * dsilu_z)
            else:
                tiles[c].store(dx_ref, dh)
            if dims.gate_after:
                o = n * weights[c] + biases[c] if dims.has_bias else n * weights[c]
                tiles[c].store(dz_ref, dout * o * _silu_parts(z, dims.interpret)[1])
            dw, db = sums[c]
            new_sums.append((dw + jnp.sum(do * n, axis=0), db + jnp.sum(do, axis=0)))
        return new_sums

    zero = jnp.zeros((dims.block_cols,), jnp.float32)  # rows past the end load as 0 and add nothing
    sums = jax.lax.fori_loop(0, dims.blocks_per_program, row_block, [(zero, zero) for _ in range(dims.chunks)])
    for c, (dw, db) in enumerate(sums):
        tile = _Tile(dims, group, 0, c)
        idx = (pl.program_id(0), pl.ds(tile.c0, dims.block_cols))
        plgpu.store(dw_ref.at[idx], dw, mask=tile.cmask)
        if dims.has_bias:
            plgpu.store(db_ref.at[idx], db, mask=tile.cmask)


def _params(grid, dims: NormDims, num_warps: int):
    return dict(
        grid=grid,
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=1),
    )


def _operands(x, z, weight, bias):
    """The kernels' operand list: absent z or bias as a (1, 1) placeholder the kernel never reads."""
    placeholder = jnp.zeros((1, 1), jnp.float32)
    return [
        x,
        placeholder if z is None else z,
        weight.astype(jnp.float32)[None, :],
        placeholder if bias is None else bias.astype(jnp.float32)[None, :],
    ]


def norm_forward(x, z, weight, bias, dims: NormDims, num_warps: int) -> jax.Array:
    """out (rows, dim) in x.dtype."""
    return pl.pallas_call(
        functools.partial(_fwd_kernel, dims=dims),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        name="rmsnorm_gated_fwd",
        **_params((dims.row_blocks, dims.groups), dims, num_warps),
    )(*_operands(x, z, weight, bias))


def norm_backward(x, z, weight, bias, dout, dims: NormDims, num_warps: int):
    """(dx (rows, dim) in x.dtype, dz like z or None, dw partials (bwd_programs, dim) f32, db partials or None)."""
    partial = jax.ShapeDtypeStruct((dims.bwd_programs, dims.dim), jnp.float32)
    placeholder = jax.ShapeDtypeStruct((1, 1), jnp.float32)
    shapes = [
        jax.ShapeDtypeStruct(x.shape, x.dtype),
        jax.ShapeDtypeStruct(z.shape, z.dtype) if z is not None else placeholder,
        partial,
        partial if bias is not None else placeholder,
    ]
    dx, dz, dw, db = pl.pallas_call(
        functools.partial(_bwd_kernel, dims=dims),
        out_shape=shapes,
        name="rmsnorm_gated_bwd",
        **_params((dims.bwd_programs, dims.groups), dims, num_warps),
    )(*_operands(x, z, weight, bias), dout)
    return dx, (dz if z is not None else None), dw, (db if bias is not None else None)
