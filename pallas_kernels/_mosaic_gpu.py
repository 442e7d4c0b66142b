"""Helpers shared by the Mosaic GPU kernels of every op: the kernel call (compiled, or in Pallas's GPU interpreter)
and a sigmoid that lowers to few instructions."""

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import mosaic_gpu as plgpu


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
