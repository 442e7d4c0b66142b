"""Language modeling (family ``lm``): mamba-ssm's ``MambaLMHeadModel`` on byte-level text or the synthetic tasks,
next-token cross-entropy over the masked positions."""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.configs.schema import RunConfig
from jax_mamba.data import Batch, DataError, Dataset, make_dataset
from jax_mamba.models import MambaLMHeadModel
from jax_mamba.tasks.losses import cross_entropy

_DECAYED_SUFFIXES = (".kernel", ".embedding", "conv1d.weight")


class LanguageModeling:
    unit = "tokens"

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.metric = "bits_per_byte" if cfg.data.kind in ("stdlib", "text") else "accuracy"

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        return MambaLMHeadModel(self.cfg.model, rngs=rngs)

    def make_dataset(self) -> Dataset:
        dataset = make_dataset(self.cfg.data, self.cfg.train)
        if self.cfg.model.vocab_size < dataset.vocab_size:
            raise DataError(
                f"model.vocab_size={self.cfg.model.vocab_size} is smaller than the data's vocabulary "
                f"({dataset.vocab_size} tokens)"
            )
        return dataset

    def items_per_batch(self) -> int:
        return self.cfg.train.batch_size * self.cfg.train.seq_len

    def forward(self, model, batch: Batch, rngs=None) -> jax.Array:
        """logits (batch, L, padded vocab) in the compute dtype."""
        return model(batch["inputs"])

    def loss_terms(self, model, batch: Batch, *, train: bool, rngs=None) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Summed token NLL (label-smoothed in training if configured) over the positions where mask is 1, the
        scored count and the correct argmax predictions. Logits are float32 before the softmax."""
        logits = self.forward(model, batch).astype(jnp.float32)
        smoothing = self.cfg.train.label_smoothing if train else 0.0
        nll = cross_entropy(logits, batch["targets"], smoothing)
        mask = batch["mask"]
        correct = (jnp.argmax(logits, axis=-1) == batch["targets"]).astype(jnp.float32)
        return jnp.sum(nll * mask), {"count": jnp.sum(mask), "correct": jnp.sum(correct * mask)}

    def train_metrics(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """Accuracy of a training step where the data is scored by it (the synthetic tasks)."""
        return {"accuracy": sums["correct"] / jnp.maximum(sums["count"], 1.0)} if self.metric == "accuracy" else {}

    def eval_metrics(self, loss_sum: float, sums: dict[str, float]) -> dict[str, float]:
        count = max(sums["count"], 1.0)
        loss = loss_sum / count
        result = {"eval_loss": loss, "eval_perplexity": math.exp(min(loss, 700.0))}
        if self.metric == "bits_per_byte":
            result["eval_bits_per_byte"] = loss / math.log(2)
        else:
            result["eval_accuracy"] = sums["correct"] / count
        return result

    def weight_decay_mask(self, params: dict[str, jax.Array]) -> dict[str, bool]:
        """Decay Linear/Embedding/conv weights; never A_log, D, dt_bias, biases or norm weights (mamba-ssm's
        ``_no_weight_decay`` parameters and the usual GPT exclusions)."""
        return {name: name.endswith(_DECAYED_SUFFIXES) for name in params}
