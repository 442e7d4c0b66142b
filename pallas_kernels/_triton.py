"""Helpers shared by the Pallas Triton kernels: interpret-mode choice and its threads, fast exp2, power-of-two sizes.

Kernels run compiled through the Triton backend on a GPU and in Pallas interpret mode elsewhere (the CPU tests).
"""

import os

import jax
import jax.numpy as jnp
from jax.experimental.pallas import triton as plgpu

LOG2_E = 1.4426950408889634
LN_2 = 0.6931471805599453


def interpret_mode() -> bool:
    """Pallas kernels are compiled for the GPU when JAX's default backend is one, else interpreted."""
    return jax.default_backend() != "gpu"


def interpreter_threads() -> int:
    """Threads of XLA's CPU pool as XLA sizes it when JAX starts its CPU client: ``PJRT_NPROC`` or ``NPROC`` if set,
    else the CPUs this process may run on (read now: the pool keeps the size it started with). Pallas's Mosaic GPU
    interpreter runs a program of several warpgroups as one computation a warpgroup, each holding a thread of that
    pool while it waits at a barrier, beside the program's computation that waits for them all: a program of W
    warpgroups needs W + 1 threads, and with fewer its last warpgroup may never start (seen on 2 CPUs)."""
    for name in ("PJRT_NPROC", "NPROC"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return len(os.sched_getaffinity(0))


def interpreted_warpgroups() -> int | None:
    """The most warpgroups a Mosaic GPU program may have here: one thread of ``interpreter_threads`` fewer when
    interpreted (the program's own computation holds the last), None when compiled (no such limit)."""
    return interpreter_threads() - 1 if interpret_mode() else None


def gpu_sm_count(default: int = 132) -> int:
    """Streaming multiprocessors of the GPU that runs the kernels; ``default`` (an H100's 132) when interpreted or
    when the device does not say, so that a default tiling depends only on the shapes there."""
    if interpret_mode():
        return default
    return getattr(jax.devices()[0], "core_count", None) or default


def gpu_compute_capability() -> str | None:
    """The GPU's compute capability as its device reports it ("9.0" for an H100), None where it does not say."""
    return getattr(jax.devices()[0], "compute_capability", None)


def gpu_has_wgmma() -> bool:
    """Whether the GPU has Hopper's warpgroup matrix multiply (``wgmma``, compute capability 9.x) that the Mosaic GPU
    kernels use; True when interpreted, so that a default tiling depends only on the shapes there (as an H100's)."""
    if interpret_mode():
        return True
    return str(gpu_compute_capability()).split(".")[0] == "9"


def next_pow2(n: int) -> int:
    """Triton tiles need power-of-two sizes: the smallest power of two >= n (>= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def _sfu(instruction: str, x: jax.Array) -> jax.Array:
    (y,) = plgpu.elementwise_inline_asm(
        f"{instruction} $0, $1;",
        args=[x],
        constraints="=r,r",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(x.shape, jnp.float32)],
    )
    return y


def exp2(x: jax.Array, interpret: bool) -> jax.Array:
    """2**x on float32: one ``ex2.approx.ftz`` (SFU) instruction on the GPU, as CUDA's fast-math exp2f."""
    return jnp.exp2(x) if interpret else _sfu("ex2.approx.ftz.f32", x)


def exp(x: jax.Array, interpret: bool) -> jax.Array:
    return exp2(x * LOG2_E, interpret)


def reciprocal(x: jax.Array, interpret: bool) -> jax.Array:
    """1/x on float32: ``rcp.approx.ftz`` on the GPU (what fast-math division compiles to)."""
    return 1.0 / x if interpret else _sfu("rcp.approx.ftz.f32", x)


def sigmoid(x: jax.Array, interpret: bool) -> jax.Array:
    return reciprocal(1.0 + exp(-x, interpret), interpret)


def log1p(x: jax.Array, interpret: bool) -> jax.Array:
    """log(1 + x) for x >= 0 without branches (libdevice's log1pf branches, which splits the time loop's basic
    blocks): log(u) * x / (u - 1) with u = 1 + x rounded, exact to a few ulp (Goldberg's trick); x where u == 1."""
    if interpret:
        return jnp.log1p(x)
    u = 1.0 + x
    log_u = _sfu("lg2.approx.ftz.f32", u) * LN_2
    return jnp.where(u == 1.0, x, log_u * x * reciprocal(u - 1.0, interpret))


def softplus(x: jax.Array, interpret: bool) -> jax.Array:
    """log(1 + e^x) as mamba-ssm's kernels compute it (fast exp), identity above 20."""
    return jnp.where(x <= 20.0, log1p(exp(jnp.minimum(x, 20.0), interpret), interpret), x)
