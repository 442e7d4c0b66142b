"""Training one run from several processes (hosts), JAX's multi-controller way: every process runs the same program
over one global mesh of all processes' devices; ``jax.distributed`` connects them, XLA's collectives do the rest.

- Start-up (``initialize_from_env``): ``JAX_COORDINATOR_ADDRESS`` (host:port of process 0), ``JAX_NUM_PROCESSES``
  and ``JAX_PROCESS_ID`` (and optionally ``JAX_LOCAL_DEVICE_IDS``) in each process's environment; or a launcher
  JAX detects by itself (SLURM, Open MPI) running more than one task. Nothing set: one process, nothing to do.
- Data (``GlobalBatches``): a step's global batch is a pure function of (seed, step), so it is the same whatever the
  device or process count. Each process builds only the rows its own devices hold (datasets with
  ``train_batch_rows``; others build the whole batch and keep their rows) and the global array is assembled from
  the processes' pieces (``jax.make_array_from_callback``).
- Files: process 0 (``jax_mamba.processes.is_leader``) writes the run folder's config, records, metrics and plots;
  orbax saves and restores checkpoints from every process into the shared folder.
"""

import os
from collections.abc import Callable, Mapping

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jax_mamba.train.sharding import batch_sharding

COORDINATOR = "JAX_COORDINATOR_ADDRESS"
PROCESSES = "JAX_NUM_PROCESSES"
PROCESS_ID = "JAX_PROCESS_ID"
LAUNCHER_TASKS = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")  # launchers whose tasks jax.distributed finds by itself
_SHARED_TEXT_BYTES = 4096  # the longest text (a run folder's path) that broadcast_text carries


class DistributedError(ValueError):
    """Multi-process settings that cannot start a run, naming the variable and what it must hold."""


def _env_int(env: Mapping[str, str], name: str, minimum: int) -> int:
    value = env.get(name)
    if value is None:
        raise DistributedError(f"{COORDINATOR} is set, so {name} must be too (an int >= {minimum})")
    try:
        number = int(value)
    except ValueError:
        raise DistributedError(f"{name} must be an int >= {minimum}, got {value!r}") from None
    if number < minimum:
        raise DistributedError(f"{name} must be an int >= {minimum}, got {number}")
    return number


def settings_from_env(env: Mapping[str, str]) -> tuple[str, int, int] | None:
    """(coordinator address, process count, this process's id) from ``JAX_*`` variables, or None when
    ``JAX_COORDINATOR_ADDRESS`` is not set. Checked before anything starts."""
    address = env.get(COORDINATOR)
    if not address:
        return None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise DistributedError(f"{COORDINATOR} must be host:port (process 0's address), got {address!r}")
    processes = _env_int(env, PROCESSES, 1)
    process_id = _env_int(env, PROCESS_ID, 0)
    if process_id >= processes:
        raise DistributedError(f"{PROCESS_ID} must be below {PROCESSES}={processes}, got {process_id}")
    return address, processes, process_id


def initialize_from_env(env: Mapping[str, str] | None = None) -> int:
    """Join the other processes of a multi-process run when the environment describes one (see the module's
    docstring); call before anything else uses JAX. Returns the process count."""
    env = os.environ if env is None else env
    settings = settings_from_env(env)
    if settings is not None and settings[1] > 1:
        address, processes, process_id = settings
        jax.distributed.initialize(address, processes, process_id)
    elif settings is None and any(_launched_tasks(env, name) > 1 for name in LAUNCHER_TASKS):
        jax.distributed.initialize()
    return jax.process_count()


def _launched_tasks(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    return int(value) if value.isdigit() else 1


def broadcast_text(text: str) -> str:
    """Process 0's ``text`` in every process (e.g. a run folder named by the clock); itself with one process."""
    if jax.process_count() == 1:
        return text
    data = text.encode()
    if len(data) > _SHARED_TEXT_BYTES:
        raise DistributedError(f"cannot share a text of {len(data)} bytes between processes (at most 4096)")
    buffer = np.zeros(_SHARED_TEXT_BYTES + 4, np.uint8)
    buffer[:4] = np.frombuffer(np.uint32(len(data)).tobytes(), np.uint8)
    buffer[4 : 4 + len(data)] = np.frombuffer(data, np.uint8)
    shared = np.asarray(multihost_utils.broadcast_one_to_all(buffer))
    size = int(np.frombuffer(shared[:4].tobytes(), np.uint32)[0])
    return shared[4 : 4 + size].tobytes().decode()


def process_rows(mesh: Mesh, batch_size: int) -> tuple[int, int]:
    """[start, stop) of a global batch's rows that this process's devices hold under ``batch_sharding``: one
    contiguous range (the mesh lists each process's devices together, as ``jax.devices()`` does)."""
    sharding = batch_sharding(mesh, 2)
    held = {
        index[1].indices(batch_size)[:2] for index in sharding.addressable_devices_indices_map((1, batch_size)).values()
    }
    start, stop = min(s for s, _ in held), max(e for _, e in held)
    if sum(e - s for s, e in held) != stop - start:
        raise DistributedError(
            f"this process's devices hold rows {sorted(held)} of the batch, not one range: build the mesh from "
            "jax.devices() in order"
        )
    return start, stop


def global_array(local: np.ndarray, sharding: NamedSharding, global_shape: tuple[int, ...], row_start: int):
    """The global array of ``global_shape`` whose axis-1 rows [row_start, row_start + local.shape[1]) this process
    holds as ``local`` (the other processes hold the rest)."""

    def piece(index: tuple[slice, ...]) -> np.ndarray:
        rows = index[1]
        start, stop, _ = rows.indices(global_shape[1])
        return local[(index[0], slice(start - row_start, stop - row_start), *index[2:])]

    return jax.make_array_from_callback(global_shape, sharding, piece)


class GlobalBatches:
    """``batches(step)``: the training batch of ``step`` as global arrays on ``mesh`` (rows over data x fsdp, positions
    over context), built from this process's rows only where the dataset can (``train_batch_rows(step, accum,
    start, stop)``; else from its whole ``train_batch``)."""

    def __init__(self, dataset, mesh: Mesh, batch_size: int, accum: int):
        self.dataset, self.mesh, self.batch_size, self.accum = dataset, mesh, batch_size, accum
        self.rows = process_rows(mesh, batch_size)

    def __call__(self, step: int) -> dict:
        make_rows: Callable | None = getattr(self.dataset, "train_batch_rows", None)
        if make_rows is None:
            whole = self.dataset.train_batch(step, self.accum)
            return {k: self._place(v, v.shape, 0) for k, v in whole.items()}
        start, stop = self.rows
        local = make_rows(step, self.accum, start, stop)
        return {k: self._place(v, (v.shape[0], self.batch_size, *v.shape[2:]), start) for k, v in local.items()}

    def _place(self, local: np.ndarray, global_shape: tuple[int, ...], row_start: int):
        return global_array(local, batch_sharding(self.mesh, local.ndim), global_shape, row_start)


def replicated(tree, mesh: Mesh):
    """Host arrays (the same in every process) as global arrays held whole by every device of ``mesh``."""
    sharding = NamedSharding(mesh, P())
    return jax.tree.map(lambda x: jax.make_array_from_callback(np.shape(x), sharding, lambda i: np.asarray(x)[i]), tree)
