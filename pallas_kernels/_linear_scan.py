"""A first-order linear recurrence along one axis of a tile, for use inside Pallas Triton kernels.

    h_t = a_t h_{t-1} + b_t   (h before the first element is 0),  a_cum_t = prod_{s <= t} a_s
    reverse=True:  h_t = a_t h_{t+1} + b_t,  a_cum_t = prod_{s >= t} a_s

``linear_scan(a, b, axis=0)`` returns (a_cum, h) with a's and b's shape and dtype. Inside a kernel compiled for the
GPU it is one Triton scan (``tt.scan``) of the pairs (a, b) under the composition of affine maps: Triton splits it
into a sequential part over each thread's consecutive elements, a warp-shuffle part and a cross-warp part, which is
how the scan gets parallelism along time. Pallas exposes Triton's scan only as ``cumsum``; this module registers a
lowering rule of its own for the pair scan with Pallas's Triton lowering (a private JAX module, pinned by the
project's jax version). Everywhere else (interpret mode on the CPU, plain XLA) the same primitive runs as
``lax.associative_scan`` with the same combine, the ground truth the kernels' CPU tests run.
"""

import jax
import jax.numpy as jnp
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import arith
from jax._src.lib.triton import dialect as tt_dialect
from jax._src.pallas.triton import lowering as triton_lowering
from jax.extend.core import Primitive


def _compose(left, right):
    """The affine map h -> a h + b of ``left`` followed by that of ``right``."""
    a_l, b_l = left
    a_r, b_r = right
    return a_l * a_r, a_r * b_l + b_r


def _scan_impl(a, b, *, axis: int, reverse: bool):
    return jax.lax.associative_scan(_compose, (a, b), axis=axis, reverse=reverse)


linear_scan_p = Primitive("pallas_linear_scan")
linear_scan_p.multiple_results = True
linear_scan_p.def_impl(_scan_impl)
linear_scan_p.def_abstract_eval(lambda a, b, *, axis, reverse: (a, b))
mlir.register_lowering(linear_scan_p, mlir.lower_fun(_scan_impl, multiple_results=True))


@triton_lowering.register_lowering(linear_scan_p)
def _triton_rule(ctx, a, b, *, axis: int, reverse: bool):
    """One ``tt.scan`` over (a, b) whose combine region is ``_compose`` in float32 arithmetic. Triton's reverse
    scan runs from the last element to the first, with the accumulated suffix as the combine's left operand."""
    element = ir.F32Type.get()
    scan = tt_dialect.ScanOp([a, b], axis, reverse)
    block = scan.regions[0].blocks.append(element, element, element, element)
    with ir.InsertionPoint(block):
        a_l, b_l, a_r, b_r = block.arguments
        a_out = arith.mulf(a_l, a_r)
        b_out = arith.addf(arith.mulf(a_r, b_l), b_r)
        tt_dialect.scan_return([a_out, b_out])
    scan.verify()
    return list(scan.result)


def linear_scan(a: jax.Array, b: jax.Array, *, axis: int = 0, reverse: bool = False) -> tuple[jax.Array, jax.Array]:
    """(a_cum, h) of the recurrence h_t = a_t h_{t-1} + b_t along ``axis`` (float32 tiles of one shape)."""
    if a.shape != b.shape or a.dtype != jnp.float32 or b.dtype != jnp.float32:
        raise ValueError(
            f"linear_scan needs float32 a and b of one shape, got a {a.dtype}{a.shape} and b {b.dtype}{b.shape}"
        )
    axis = axis % a.ndim
    return tuple(linear_scan_p.bind(a, b, axis=axis, reverse=bool(reverse)))
