"""The Pallas gated RMSNorm as a differentiable function: forward kernel, backward kernel, ``jax.custom_vjp``.

Arguments are pre-checked by ``api.rmsnorm_fn``: x (..., dim), z like x or None, weight (dim,), bias (dim,) or None.
Returns out like x. The backward keeps only the inputs and recomputes each row's statistics, so nothing beyond x and
z is saved; dw and db are summed from per-program float32 partials in a fixed order (deterministic).
"""

import functools

import jax

from pallas_kernels._triton import next_pow2
from pallas_kernels.rmsnorm_gated.config import NormConfig
from pallas_kernels.rmsnorm_gated.kernel import NormDims, norm_backward, norm_forward


def _dims(x, group: int, has_z, has_bias, norm_before_gate, eps, config, sm_count, interpret) -> NormDims:
    """The tiling for x (..., dim) seen as (rows, dim) rows of ``group``-channel groups."""
    dim = x.shape[-1]
    rows = x.size // dim
    block_cols = min(next_pow2(group), config.max_block_cols)
    block_rows = max(1, min(config.tile_elements // block_cols, next_pow2(rows)))
    row_blocks = -(-rows // block_rows)
    wanted = max(1, config.bwd_programs_per_sm * sm_count // (dim // group))
    per_program = -(-row_blocks // min(wanted, row_blocks))
    return NormDims(
        rows=rows,
        dim=dim,
        group=group,
        has_z=has_z,
        has_bias=has_bias,
        norm_before_gate=norm_before_gate,
        eps=eps,
        block_rows=block_rows,
        block_cols=block_cols,
        bwd_programs=-(-row_blocks // per_program),
        interpret=interpret,
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7, 8, 9))
def rmsnorm(x, weight, bias, z, eps: float, group: int, norm_before_gate: bool, config, sm_count: int, interpret):
    dims = _dims(x, group, z is not None, bias is not None, norm_before_gate, eps, config, sm_count, interpret)
    out = norm_forward(x.reshape(dims.rows, dims.dim), _rows(z, dims), weight, bias, dims, _warps(dims, config))
    return out.reshape(x.shape)


def _rows(t, dims: NormDims):
    return None if t is None else t.reshape(dims.rows, dims.dim)


def _warps(dims: NormDims, config: NormConfig) -> int:
    return config.warps(dims.block_rows * dims.block_cols)


def _fwd(x, weight, bias, z, eps, group, norm_before_gate, config, sm_count, interpret):
    out = rmsnorm(x, weight, bias, z, eps, group, norm_before_gate, config, sm_count, interpret)
    return out, (x, weight, bias, z)


def _bwd(eps, group, norm_before_gate, config, sm_count, interpret, residuals, dout):
    x, weight, bias, z = residuals
    dims = _dims(x, group, z is not None, bias is not None, norm_before_gate, eps, config, sm_count, interpret)
    dx, dz, dw, db = norm_backward(
        x.reshape(dims.rows, dims.dim),
        _rows(z, dims),
        weight,
        bias,
        dout.astype(x.dtype).reshape(dims.rows, dims.dim),
        dims,
        _warps(dims, config),
    )
    dw = dw.sum(axis=0).astype(weight.dtype)
    db = None if bias is None else db.sum(axis=0).astype(bias.dtype)
    dz = None if z is None else dz.reshape(z.shape)
    return dx.reshape(x.shape), dw, db, dz


rmsnorm.defvjp(_fwd, _bwd)
