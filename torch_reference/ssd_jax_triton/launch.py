"""One installed Triton kernel launched from JAX through jax-triton, by parameter name, with the arguments
mamba-ssm's own host code would give it (contiguous arrays: strides are those of row-major layouts)."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from torch_reference.triton_outputs_last import outputs_last, parameter_order, zeroed_by_pre_hooks


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a contiguous array of ``shape`` (what ``torch.Tensor.stride()`` gives mamba-ssm)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return int(2 ** math.ceil(math.log2(n)))


def named(prefix: str, axes: tuple[str, ...], strides: tuple[int, ...]) -> dict[str, int]:
    """``{prefix_axis: stride}``: a kernel's stride parameters for one array."""
    return {f"{prefix}_{axis}": int(stride) for axis, stride in zip(axes, strides, strict=True)}


def placeholder(dtype) -> jax.Array:
    """A pointer argument the kernel never touches (its HAS_* constant is False; mamba-ssm passes None)."""
    return jnp.zeros((1,), dtype)


def dot_dtype(*dtypes):
    """The dot operand type mamba-ssm's C·Bᵀ kernels pick from their operands' dtypes."""
    import triton.language as tl

    names = {np.dtype(d).name for d in dtypes}
    return tl.bfloat16 if "bfloat16" in names else tl.float16 if "float16" in names else tl.float32


def launch(kernel, grid, inputs: dict, outputs: dict, constants: dict, name: str, zeroed: tuple[str, ...] = ()):
    """Launch ``kernel`` (a JITFunction or Autotuner) with ``inputs`` (parameter name -> array or scalar) and
    ``outputs`` (name -> ``jax.ShapeDtypeStruct``); returns {output name: array}. ``constants`` are its
    compile-time values (the autotuned ones come from its configs). Outputs that its configs' pre-hooks zero, and
    those named in ``zeroed`` (partial-sum buffers whose unused tiles are summed), start as zeros."""
    jax_triton = import_jax_triton()
    runtime, _ = parameter_order(getattr(kernel, "fn", kernel), tuple(outputs))
    missing = [n for n in runtime if n not in inputs and n not in outputs]
    if missing:
        raise TypeError(f"{name}: no value for {missing}")
    unknown = sorted(set(zeroed) - set(outputs))
    if unknown:
        raise ValueError(f"{name}: zeroed {unknown} are not outputs {sorted(outputs)}")
    # what Triton's own launcher would specialize on (jax-triton does not): integers that are multiples of 16
    sixteens = frozenset(n for n, v in inputs.items() if type(v) is int and v % 16 == 0)
    ordered_outputs = [n for n in runtime if n in outputs]
    zero = (zeroed_by_pre_hooks(kernel) | set(zeroed)) & set(outputs)
    results = jax_triton.triton_call(
        *[inputs[n] for n in runtime if n in inputs],
        kernel=outputs_last(kernel, tuple(outputs), sixteens),
        out_shape=[outputs[n] for n in ordered_outputs],
        grid=grid,
        name=name,
        zeroed_outputs=tuple(i for i, n in enumerate(ordered_outputs) if n in zero),
        **constants,
    )
    return dict(zip(ordered_outputs, results, strict=True))


def import_jax_triton():
    """jax_triton, imported so that it leaves Triton usable by PyTorch in the same process: on import it sets
    ``TRITON_CACHE_DIR`` to an empty string (it compiles without Triton's cache), after which Triton launched from
    PyTorch cannot build its driver ("Could not create or locate cache dir"). The empty setting is removed, so
    Triton falls back to its default folder; jax-triton never reads it again."""
    import os

    import jax_triton

    if os.environ.get("TRITON_CACHE_DIR") == "":
        del os.environ["TRITON_CACHE_DIR"]
    return jax_triton
