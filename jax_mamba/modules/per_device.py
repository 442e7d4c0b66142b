"""Running a Pallas kernel on each device's rows under a mesh: the kernels do not partition themselves, so under a
mesh with the batch axes (``jax.set_mesh``) their call is wrapped in ``shard_map``: arrays with a leading batch axis
are split over it, the rest (weights) replicated, and each device runs the kernel on its own rows. Without a mesh,
or with one device, or for the pure-JAX reference ops (which XLA partitions itself), the call is unchanged. With a
``context`` axis (Mamba-2's context parallelism, ``modules.context_parallel``) the arrays' positions are split over
it as well."""

import math
from collections.abc import Callable

import jax
from jax.sharding import PartitionSpec as P

BATCH_AXES = ("data", "fsdp")


def batch_axes() -> tuple[str, ...]:
    """The current mesh's batch axes of size > 1 (none without a mesh). Axes already manual (inside a ``shard_map``
    over them, such as the per-device gradients of ``mesh.grad_reduce="early"``) are not: each device there holds
    its own rows as a whole batch."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return ()
    manual = set(mesh.manual_axes)
    return tuple(a for a in BATCH_AXES if a in mesh.axis_names and a not in manual and mesh.shape[a] > 1)


def context_size() -> int:
    """The current mesh's ``context`` axis size (1 without one): sequences split over that many devices."""
    mesh = jax.sharding.get_abstract_mesh()
    return 1 if mesh.empty or "context" not in mesh.axis_names else mesh.shape["context"]


def position_axes() -> tuple[str, ...]:
    """The current mesh's axes of size > 1 that a batch's positions are split over: the batch axes (rows), then
    ``context`` (positions within a row)."""
    return batch_axes() + (("context",) if context_size() > 1 else ())


def batch_spec() -> P:
    """How a (batch, L, ...) array is split under the current mesh: rows over the batch axes, L over ``context``."""
    axes = batch_axes() or None
    return P(axes, "context") if context_size() > 1 else P(axes)


def batch_devices() -> int:
    """How many devices a batch's positions are spread over under the current mesh (1 without a mesh)."""
    mesh = jax.sharding.get_abstract_mesh()
    return math.prod(mesh.shape[a] for a in position_axes())


def per_device(fn: Callable, impl: str, batched: tuple[bool, ...], out_batched, *args):
    """``fn(*args)``; for ``impl == "pallas"`` under a mesh, run per device over the batch axes. ``batched[i]``:
    whether args[i] has a leading batch axis (None args are passed through); ``out_batched``: the same for the
    outputs (a bool, or a tuple of them for a tuple of outputs)."""
    axes, context = batch_axes(), context_size()
    if impl != "pallas" or (not axes and context == 1):
        return fn(*args)
    present = [i for i, a in enumerate(args) if a is not None]

    def local(*values):
        full = list(args)
        for i, v in zip(present, values, strict=True):
            full[i] = v
        return fn(*full)

    # with a context axis, batched arrays are (batch, L, ...) split over it too (per-position ops: the norms)
    sharded = batch_spec()
    spec = lambda b: sharded if b else P()  # noqa: E731
    in_specs = tuple(spec(batched[i]) for i in present)
    out_specs = tuple(map(spec, out_batched)) if isinstance(out_batched, tuple) else spec(out_batched)
    return jax.shard_map(local, in_specs=in_specs, out_specs=out_specs, check_vma=False)(*(args[i] for i in present))
