"""The batch format and the dataset interface the training loop relies on."""

from collections.abc import Iterable
from typing import Protocol

import numpy as np

Batch = dict[str, np.ndarray]
"""Language models: inputs int32 (..., batch, L); targets int32 (..., batch, L); mask float32 (..., batch, L).
Images: images uint8 (..., batch, H, W, 3); labels int32 (..., batch); mask float32 (..., batch).
The mask is 1 where a position or sample is scored."""

EVAL_STREAM = 1_000_003  # seed-sequence entry separating evaluation batches from training batches


def step_rng(seed: int, step: int, micro: int) -> np.random.Generator:
    """The generator for one micro-batch of one step: a pure function of its coordinates."""
    return np.random.default_rng([seed, step, micro])


class Dataset(Protocol):
    metric: str  # "bits_per_byte" (byte-level text), "accuracy" (synthetic tasks) or "top1" (images)

    def train_batch(self, step: int, accum: int) -> Batch:
        """Arrays with leading axes (accum, batch) for optimizer step ``step``. A dataset may also offer
        ``train_batch_rows(step, accum, start, stop)``: rows [start, stop) of the same batch, built without the
        others (a process of a multi-process run then reads only its share; ``train.distributed.GlobalBatches``)."""
        ...

    def eval_batches(self) -> Iterable[Batch]:
        """Batches with leading axis (batch,), the same at every evaluation."""
        ...

    def describe(self) -> dict:
        """A short JSON-able description (source, sizes) for the run's metadata."""
        ...
