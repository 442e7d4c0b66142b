"""The Mosaic GPU interpreter's callbacks get their arguments as JAX's own path would give them (CPU ``jax.Array``
values, canonical dtypes, the same values), and every other callback still goes through JAX's path."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from tests import interpreter_callbacks


def _recorder(module: str, seen: list):
    def record(*args):
        seen.append(args)
        return np.int32(0)

    record.__module__ = module
    return record


def _run(callback, *args):
    @jax.jit
    def program(*args):
        return io_callback(callback, jax.ShapeDtypeStruct((), jnp.int32), *args)

    return program(*args).block_until_ready()


def test_installed_for_the_pinned_jax():
    from jax._src import callback

    assert interpreter_callbacks.install()
    installed = callback.io_callback_impl
    assert installed._interpreter_fast_path
    assert interpreter_callbacks.install() and callback.io_callback_impl is installed  # not wrapped a second time


def test_cpu_computations_run_inline():
    """``dispatch_inline`` (tests/conftest.py) took effect before the CPU client started."""
    from jax._src import xla_bridge

    assert jax.config.values["jax_cpu_enable_async_dispatch"] is False
    assert not xla_bridge._CPU_ENABLE_ASYNC_DISPATCH.value


def test_interpreter_callbacks_get_cpu_arrays_with_jaxs_dtypes_and_values(rng):
    seen = []
    callback = _recorder(interpreter_callbacks._INTERPRETER_MODULE + ".gpu_callbacks", seen)
    block = rng.standard_normal((3, 5)).astype(np.float32)
    index = int(rng.integers(0, 1000))
    for _ in range(2):
        _run(callback, jnp.int32(index), jnp.asarray(block), jnp.asarray(block[0, 0], jnp.bfloat16))
    first, second = seen
    cpu = jax.devices("cpu")[0]
    for got in first:
        assert isinstance(got, jax.Array) and got.devices() == {cpu}
    assert [a.dtype for a in first] == [jnp.int32, jnp.float32, jnp.bfloat16]
    assert int(first[0]) == index and first[0].item() == index
    np.testing.assert_array_equal(np.asarray(first[1]), block)
    assert float(first[2]) == float(jnp.asarray(block[0, 0], jnp.bfloat16))
    assert second[0] is first[0]  # scalars are made once a value
    np.testing.assert_array_equal(np.asarray(second[1]), block)


def test_other_callbacks_keep_jaxs_path(rng):
    seen = []
    index = int(rng.integers(0, 1000))
    _run(_recorder(__name__, seen), jnp.int32(index))
    _run(_recorder(__name__, seen), jnp.int32(index))
    (first,), (second,) = seen
    assert isinstance(first, jax.Array) and int(first) == index
    assert second is not first  # JAX puts each argument afresh
