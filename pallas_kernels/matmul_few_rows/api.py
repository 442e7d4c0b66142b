"""Public few-rows matmul: x (M, K) @ w (K, N) for M up to MAX_ROWS, the shape of every linear layer in decoding."""

import jax

from pallas_kernels._checks import check_array, check_config, check_impl
from pallas_kernels._triton import gpu_sm_count, interpret_mode
from pallas_kernels.matmul_few_rows import reference, vjp
from pallas_kernels.matmul_few_rows.config import MatmulFewRowsConfig

_AVAILABLE_IMPLS = ("reference", "pallas")
MAX_ROWS = 64  # the Pallas kernel pads the rows to a power of two >= 16 and keeps them all in registers


def matmul_few_rows(
    x: jax.Array, w: jax.Array, *, impl: str = "reference", config: MatmulFewRowsConfig | None = None
) -> jax.Array:
    """x (M, K) @ w (K, N) -> (M, N) in x.dtype: w cast to x.dtype, products summed in float32.

    For few rows (decoding: M = batch rows x 1 position) the work is reading w once, K x N x itemsize bytes. XLA
    turns such a dot into a reduction that reads w at a fraction of the memory bandwidth; ``impl="pallas"`` runs a
    Pallas Triton kernel (interpreted when JAX has no GPU) that streams w in coalesced (block_k, block_n) tiles, K
    split over enough programs to fill the GPU, and sums the splits' float32 partials. ``config`` sets its tiling.
    ``impl="reference"``: XLA's dot. Differentiable (the backward is XLA's matmuls).
    """
    check_impl("matmul_few_rows", impl, _AVAILABLE_IMPLS)
    check_array("x", x, 2)
    check_array("w", w, 2)
    if w.shape[0] != x.shape[1]:
        raise ValueError(f"w must have shape (K, N) with K = x.shape[1] = {x.shape[1]}, got {tuple(w.shape)}")
    if x.shape[0] < 1 or w.shape[1] < 1:
        raise ValueError(f"x must have at least one row and w one column, got x {tuple(x.shape)}, w {tuple(w.shape)}")
    check_config(config, MatmulFewRowsConfig)
    if impl == "reference":
        return reference.matmul_few_rows(x, w)
    if x.shape[0] > MAX_ROWS:
        raise ValueError(f"impl='pallas' takes x with at most {MAX_ROWS} rows, got {x.shape[0]} (use the reference)")
    return vjp.matmul_few_rows(x, w, config or MatmulFewRowsConfig(), gpu_sm_count(), interpret_mode())
