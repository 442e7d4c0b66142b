"""Helpers shared by the Mosaic GPU kernels of every op: the kernel call (compiled, or in Pallas's GPU interpreter),
a sigmoid that lowers to few instructions, the store of a block of time steps that ends at L, and Hopper's shared
memory an SM, which the ops' heuristics count programs an SM by."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

SM_SHARED_BYTES = 228 * 1024  # Hopper: shared memory an SM shares among its programs, less 1 KB for each
PROGRAM_RESERVED_BYTES = 1024  # ... the 1 KB each program's share loses


def call_kernel(
    body,
    inputs: list,
    *,
    out_type,
    scratch: list,
    grid: tuple,
    grid_names: tuple,
    name: str,
    interpret: bool,
    threads: tuple[int, str] | None = None,
):
    """``body`` as a Mosaic GPU kernel with fast approximate math, named ``name`` (the profiler shows it with
    "_mosaic_gpu_kernel" appended), on ``inputs``; in Pallas's GPU interpreter where ``interpret``.
    ``threads`` (count, axis name): that many warpgroups a program, else one."""
    kernel = plgpu.kernel(
        body,
        out_type=out_type,
        scratch_types=scratch,
        grid=grid,
        grid_names=grid_names,
        kernel_name=name,
        compiler_params=plgpu.CompilerParams(approx_math=True),
        **({} if threads is None else {"num_threads": threads[0], "thread_name": threads[1]}),
    )
    with plgpu.force_gpu_interpret_mode(plgpu.InterpretGPUParams() if interpret else None):
        return kernel(*inputs)


def sigmoid(z: jax.Array) -> jax.Array:
    """1 / (1 + exp(-z)), as the square of rsqrt(1 + exp(-z)). Mosaic GPU lowers ``/`` to a correctly rounded
    division, about ten instructions with its special cases (ncu on ``ssd_bwd_dx``), and ``rsqrt`` under
    ``approx_math`` to one ``rsqrt.approx`` (relative error about 2^-22). 1 + exp(-z) >= 1, so the root is real, and
    exp's overflow (z below about -88) gives 0."""
    root = lax.rsqrt(1.0 + jnp.exp(-z))
    return root * root


def store_steps(tile, target: Callable, block, block_l: int, seqlen: int) -> None:
    """Block ``block``'s tile of ``block_l`` steps (shared memory, steps on its first axis) to ``target(steps)``,
    the global-memory view of those steps (a ``pl.ds``); of the last block only the steps before L. A store may not
    count on the copy to drop rows past L: where the tile's rows are whole rows of the array, Mosaic GPU copies them
    as one contiguous bulk transfer, bounded only by the end of the array, so a partial block's rows past L would
    land on the next batch row's first steps."""

    def store(rows: int) -> None:
        plgpu.copy_smem_to_gmem(tile.at[pl.ds(0, rows)], target(pl.ds(block * block_l, rows)))

    tail = seqlen % block_l
    if tail == 0:
        store(block_l)
        return
    last = block == pl.cdiv(seqlen, block_l) - 1
    pl.when(last)(lambda: store(tail))
    pl.when(jnp.logical_not(last))(lambda: store(block_l))
