"""The interface between a model family and the shared training loop (``jax_mamba.train``)."""

from typing import Protocol

import jax
from flax import nnx

from jax_mamba.data import Batch, Dataset


class Task(Protocol):
    """One family's model, data and objective. ``loss_terms`` returns sums over a batch (never means), so that
    gradient accumulation and evaluation over many batches weigh every scored position or sample equally."""

    unit: str  # what throughput counts: "tokens", "images" or "graphs"
    head_patterns: tuple[str, ...]  # fnmatch patterns of the output layer's parameters (``--init_from_skip=head``)

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        """A freshly initialized model (training mode)."""
        ...

    def make_dataset(self) -> Dataset:
        """The run's data, checked against the model (vocabulary, classes), or a DataError."""
        ...

    def items_per_batch(self) -> int:
        """Tokens or images in one micro-batch."""
        ...

    def forward(self, model: nnx.Module, batch: Batch, rngs: nnx.Rngs | None = None) -> jax.Array:
        """The model's logits for a batch (the inputs as the data gives them, e.g. uint8 images)."""
        ...

    def loss_terms(
        self, model: nnx.Module, batch: Batch, *, train: bool, rngs: nnx.Rngs | None
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(summed loss, {"count": scored items, ...other sums}) of one micro-batch. ``train``: the training
        objective (e.g. label smoothing) with the model in training mode; else the plain evaluation loss."""
        ...

    def train_metrics(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """Extra per-step metrics beside the loss (traced, inside the train step), from one step's sums."""
        ...

    def eval_metrics(self, loss_sum: float, sums: dict[str, float]) -> dict[str, float]:
        """Named evaluation metrics ("eval_loss", ...) from sums over the evaluation batches."""
        ...

    def weight_decay_mask(self, params: dict[str, jax.Array]) -> dict[str, bool]:
        """Which parameters AdamW/LAMB decays."""
        ...
