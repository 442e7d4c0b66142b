"""Which process of a multi-process (multi-host) run this is, and a barrier: what the run folder, the checkpoint
store and the training loop need to write once and stay in step. One process: process 0, no waiting."""

import jax
from jax.experimental import multihost_utils


def is_leader() -> bool:
    """Whether this process writes the run's files and prints (process 0)."""
    return jax.process_index() == 0


def wait_for_all(name: str) -> None:
    """A barrier: every process reaches ``name`` before any goes on (e.g. after process 0 made the run folder)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)
