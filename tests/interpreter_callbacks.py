"""A cheaper hand-over of arguments to the Mosaic GPU interpreter's callbacks, for the CPU tests.

Pallas interprets a Mosaic GPU kernel as an XLA program that calls back into Python for every load, store, barrier
and copy (about ten thousand callbacks in one of our kernel tests, a dozen arguments each, mostly scalars: thread and
device ids, indices, tokens). JAX's ``io_callback`` first makes every argument a CPU ``jax.Array`` through the
general ``jax.device_put`` (pytree, sharding and layout checks: about 80 us an argument), and that was half of such
a test's time (13 of 25 s).

``install()`` gives the interpreter's callbacks the same arrays (same values, canonical dtypes, committed to the CPU
device) made by the single-device put that ``jax.device_put`` ends in, with one array per scalar value, kept with
its host copy. Every other callback keeps JAX's own path, and what a kernel computes is unchanged. It reaches into
internals of the pinned JAX (pyproject.toml), so it checks that they are there and otherwise leaves JAX as it is.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

_INTERPRETER_MODULE = "jax._src.pallas.mosaic_gpu.interpret"


def _module_of(func: Callable) -> str:
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__module__", None) or ""


def dispatch_inline() -> None:
    """Run single-device CPU computations on the thread that calls them (``jax_cpu_enable_async_dispatch`` off); to
    be called before JAX makes its CPU client. The interpreter's callbacks run eager JAX operations of their own
    (``wait_smem_to_gmem`` compares a count with a ``jax.Array`` argument). With asynchronous dispatch, a fresh-clone
    suite run hung in a Mamba-3 kernel test: the test's thread, dispatching the next eager operation, and a callback's
    operation inside the still running kernel both waited for the CPU device's semaphore of in-flight computations."""
    from jax import config

    config.update("jax_cpu_enable_async_dispatch", False)


def install() -> bool:
    """Route the Mosaic GPU interpreter's callbacks through the cheap put; False (JAX untouched) if the internals
    it relies on are missing."""
    try:
        from jax._src import callback, config, core, dtypes, tree_util, xla_bridge
        from jax._src.lib import xla_client
        from jax._src.sharding_impls import SingleDeviceSharding
    except ImportError:
        return False
    jax_impl = getattr(callback, "io_callback_impl", None)
    if jax_impl is None or getattr(jax_impl, "_interpreter_fast_path", False):
        return jax_impl is not None

    @functools.cache
    def cpu() -> tuple[Any, Any]:
        device = xla_bridge.local_devices(backend="cpu")[0]
        return device, SingleDeviceSharding(device)

    def put(value: np.ndarray) -> Any:
        device, sharding = cpu()
        value = np.asarray(value, dtype=dtypes.canonicalize_dtype(value.dtype))
        aval = core.ShapedArray(value.shape, value.dtype)
        return xla_client.batched_device_put(aval, sharding, [value], [device], True)

    @functools.lru_cache(maxsize=4096)
    def put_scalar(dtype: np.dtype, data: bytes) -> Any:
        """Scalars (ids, indices, tokens: most arguments) repeat: one immutable array per value, read once."""
        array = put(np.frombuffer(data, dtype=dtype).reshape(()))
        array.item()  # keeps its host copy: the callbacks read scalars with ``int()``/``.item()``
        return array

    def put_argument(value: Any) -> Any:
        value = np.asarray(value)
        return put_scalar(value.dtype, value.tobytes()) if value.ndim == 0 else put(value)

    def io_callback_impl(
        *args: Any, result_avals: Sequence[Any], callback: Any, sharding: Any, ordered: bool
    ) -> Sequence[np.ndarray]:
        if not _module_of(callback.callback_func).startswith(_INTERPRETER_MODULE):
            return jax_impl(*args, result_avals=result_avals, callback=callback, sharding=sharding, ordered=ordered)
        args = [put_argument(value) for value in args]
        with config.default_device(cpu()[0]):
            return tree_util.tree_map(np.asarray, callback(*args))

    io_callback_impl._interpreter_fast_path = True
    callback.io_callback_impl = io_callback_impl
    return True
