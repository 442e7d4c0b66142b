"""The batch format and the dataset interface the training loop relies on."""

from typing import Protocol

import numpy as np

Batch = dict[str, np.ndarray]
"""inputs int32 (..., batch, L); targets int32 (..., batch, L); mask float32 (..., batch, L): 1 where scored."""

EVAL_STREAM = 1_000_003  # seed-sequence entry separating evaluation batches from training batches


def step_rng(seed: int, step: int, micro: int) -> np.random.Generator:
    """The generator for one micro-batch of one step: a pure function of its coordinates."""
    return np.random.default_rng([seed, step, micro])


class Dataset(Protocol):
    vocab_size: int  # tokens are in [0, vocab_size)
    metric: str  # "bits_per_byte" (byte-level text) or "accuracy" (synthetic tasks)

    def train_batch(self, step: int, accum: int) -> Batch:
        """Arrays shaped (accum, batch, L) for optimizer step ``step``."""
        ...

    def eval_batches(self) -> list[Batch]:
        """A fixed list of (batch, L) batches, the same at every evaluation."""
        ...

    def describe(self) -> dict:
        """A short JSON-able description (source, sizes) for the run's metadata."""
        ...
