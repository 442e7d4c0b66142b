"""Training over several devices with JAX's SPMD machinery: the mesh from ``MeshConfig``, FSDP shardings of the
parameters and optimizer state, and batches split over the data-parallel axes (and positions over ``context``).
The jit-compiled step is the same function; XLA inserts the collectives (parameter all-gathers, gradient
reduce-scatters) from these shardings.

Mesh axes: ``data`` (replicas), ``fsdp`` (each replica's parameters and optimizer state split over it) and
``context`` (Mamba-2's sequences split over it, ``modules.context_parallel``); a batch's rows are split over data x
fsdp. The Pallas kernels do not partition themselves: the modules run them under ``shard_map`` over the same axes
(``jax_mamba.modules.per_device``)."""

import dataclasses
import functools
import math

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_mamba.configs.schema import MeshConfig
from jax_mamba.modules.per_device import BATCH_AXES  # a batch's rows are split over both


class MeshError(ValueError):
    """A mesh that the devices present cannot form, with the sizes asked for and the device count."""


def make_mesh(cfg: MeshConfig, devices: list | None = None) -> Mesh:
    """(data, fsdp, context) over ``devices`` (default: all JAX sees). data 0 takes every device fsdp x context
    leaves; explicit sizes may use fewer devices than present (the first data x fsdp x context of them)."""
    devices = list(jax.devices() if devices is None else devices)
    count, inner = len(devices), cfg.fsdp * cfg.context
    if cfg.data == 0 and count % inner:
        raise MeshError(
            f"mesh.fsdp={cfg.fsdp} x mesh.context={cfg.context} must divide the {count} devices present (or set "
            "mesh.data)"
        )
    data = cfg.data or count // inner
    if data * inner > count:
        raise MeshError(
            f"mesh.data={data} x mesh.fsdp={cfg.fsdp} x mesh.context={cfg.context} needs more than the {count} "
            "devices present"
        )
    grid = np.asarray(devices[: data * inner]).reshape(data, cfg.fsdp, cfg.context)
    return Mesh(grid, ("data", "fsdp", "context"))


def fits(cfg: MeshConfig, count: int) -> bool:
    """Whether ``count`` devices can form the mesh ``cfg`` asks for."""
    inner = cfg.fsdp * cfg.context
    return count % inner == 0 if cfg.data == 0 else cfg.data * inner <= count


def fitted_mesh(cfg: MeshConfig, count: int) -> MeshConfig:
    """``cfg`` if ``count`` devices can form it; else the closest mesh they can: fsdp and context cut to their
    largest divisors that divide ``count``, data taken from what is left. A step's math does not depend on the mesh
    (every mesh trains like one device), so a run saved on N devices continues on M this way."""
    if fits(cfg, count):
        return cfg
    fsdp = math.gcd(cfg.fsdp, count)
    context = math.gcd(cfg.context, count // fsdp)
    return dataclasses.replace(cfg, data=0, fsdp=fsdp, context=context)


def param_sharding(mesh: Mesh, shape: tuple[int, ...]) -> NamedSharding:
    """FSDP: the largest axis that the fsdp size divides is split over ``fsdp``; arrays with none (and scalars)
    are replicated. Every data replica holds the same split."""
    fsdp = mesh.shape["fsdp"]
    spec = [None] * len(shape)
    if fsdp > 1:
        candidates = [(size, axis) for axis, size in enumerate(shape) if size % fsdp == 0]
        if candidates:
            spec[max(candidates)[1]] = "fsdp"
    return NamedSharding(mesh, P(*spec))


def tree_shardings(mesh: Mesh, tree):
    """``param_sharding`` of every array leaf of a tree (parameters, optimizer state, model state): optimizer
    moments have their parameter's shape and so get its split; step counters are replicated."""
    return jax.tree.map(lambda leaf: param_sharding(mesh, np.shape(leaf)), tree)


def batch_sharding(mesh: Mesh, leaf_ndim: int) -> NamedSharding:
    """Training batches (accum, batch, ...): rows split over data x fsdp; with a context axis, language models'
    (accum, batch, L) positions over it."""
    rest = [None] * (leaf_ndim - 2)
    if mesh.shape["context"] > 1 and rest:
        rest[0] = "context"
    return NamedSharding(mesh, P(None, BATCH_AXES, *rest))


def check_batch(mesh: Mesh, batch_size: int) -> None:
    rows = mesh.shape["data"] * mesh.shape["fsdp"]
    if batch_size % rows:
        raise MeshError(f"train.batch_size={batch_size} must be a multiple of data x fsdp = {rows} devices")


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _gathered(value: jax.Array, split: NamedSharding, whole: NamedSharding) -> jax.Array:
    # pinned split first: a value cast to the compute dtype is cast on the shards and gathered in that dtype (else
    # the partitioner may move the gather before the cast and move float32)
    return jax.lax.with_sharding_constraint(jax.lax.with_sharding_constraint(value, split), whole)


def _gathered_forward(value, split, whole):
    return _gathered(value, split, whole), None


def _gathered_backward(split, whole, _, grad):
    return (jax.lax.with_sharding_constraint(grad, split),)


_gathered.defvjp(_gathered_forward, _gathered_backward)


def gather_split_params(params: dict[str, jax.Array], shardings: dict[str, NamedSharding]) -> dict[str, jax.Array]:
    """FSDP's use of the parameters, spelled out for XLA's partitioner (``mesh.fsdp_gather="gather"``): each
    parameter split over ``fsdp`` is gathered whole (an all-gather) before the model uses it, and its gradient is
    constrained back to the split, which turns the batch-partial weight gradients into one reduce-scatter each.
    The model then runs on its own rows only, as in data parallelism. Left alone, the partitioner may instead split a
    matmul over the weight's features and move activations (all-gathers over the global batch, all-to-alls and
    full-size gradient all-reduces; seen in the 2.7b step's partitioned program). Values are unchanged. Each value is
    gathered in its own dtype: the train step passes the matmul weights already cast to the compute dtype
    (``ParamLayout.cast_for_compute``), so that they move as bf16, and their gradients are reduce-scattered as bf16."""
    out = {}
    for name, value in params.items():
        split = shardings[name]
        out[name] = _gathered(value, split, NamedSharding(split.mesh, P())) if _is_split(split) else value
    return out


def _is_split(sharding: NamedSharding) -> bool:
    return any(axis is not None for axis in sharding.spec)
