"""A config's training as the loop builds it, for tools that compile and run its train step outside the loop
(``train.memory_plan``, ``compare.scaling.mesh_profile``): the run's mesh (set for the modules' per-device kernels), the
task, the initial variables and train step, and the global batches, with the dataset closed however the tool ends."""

import contextlib
from collections.abc import Iterator

import jax
from jax.sharding import Mesh

from jax_mamba.configs.schema import RunConfig
from jax_mamba.data import Dataset
from jax_mamba.tasks import Task, task_for
from jax_mamba.train.distributed import GlobalBatches
from jax_mamba.train.sharding import check_batch, make_mesh
from jax_mamba.train.step import Training, init_training


@contextlib.contextmanager
def mesh_and_data(cfg: RunConfig) -> Iterator[tuple[Mesh, Task, Dataset]]:
    """(mesh, task, dataset) of ``cfg`` under ``jax.set_mesh(mesh)``, the batch size checked against the mesh before
    anything is built and the dataset closed however the caller ends (the training loop and the tools alike)."""
    mesh = make_mesh(cfg.mesh)
    check_batch(mesh, cfg.train.batch_size)
    task = task_for(cfg)
    dataset = task.make_dataset()
    try:
        with jax.set_mesh(mesh):  # the modules run Pallas kernels per device under it
            yield mesh, task, dataset
    finally:
        if hasattr(dataset, "close"):
            dataset.close()


@contextlib.contextmanager
def mesh_training(cfg: RunConfig) -> Iterator[tuple[Mesh, Task, Training, GlobalBatches]]:
    """(mesh, task, training setup, ``batches(step)`` -> that step's batch as global arrays on the mesh), under
    ``mesh_and_data``."""
    with mesh_and_data(cfg) as (mesh, task, dataset):
        setup = init_training(cfg, task, mesh)
        yield mesh, task, setup, GlobalBatches(dataset, mesh, cfg.train.batch_size, cfg.train.grad_accum_steps)
