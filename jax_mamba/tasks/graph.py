"""Graph learning (family ``graph_mamba``): Graph-Mamba on padded graph batches, node or graph level.

Objectives, as GraphGPS defines them: multiclass: cross-entropy (label smoothing as configured) over the real
nodes or graphs, scored by accuracy (node tasks also by balanced accuracy, benchmarking-GNNs' "accuracy-SBM");
multilabel: binary cross-entropy with logits over every (graph, target) entry, scored by average precision (the
mean over targets, LRGB's peptides-func metric); regression: L1 over every entry, scored by MAE."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jax_mamba.configs.schema import RunConfig
from jax_mamba.data import Batch, DataError, Dataset, make_dataset
from jax_mamba.models.graph_mamba import GraphMamba
from jax_mamba.tasks.graph_metrics import average_precision, balanced_accuracy, logit_histograms
from jax_mamba.tasks.losses import cross_entropy

# model field -> the dataset attribute it must equal (checked before training; the message names the override)
_MATCHED = ("task_level", "task_type", "node_feature_kind", "edge_feature_kind")


def class_weights(classes: jax.Array) -> jax.Array:
    """(rows,) weights of GraphGPS's weighted cross-entropy from the scored rows' one-hot labels (rows, classes),
    0 on unscored rows: class c weighs (V - n_c) / V with V the scored rows and n_c those of class c, so rare classes
    count more. With one class present every weight is 0: the loss is then 0 (the reference's is 0/0)."""
    per_class = jnp.sum(classes, axis=0)
    total = jnp.maximum(jnp.sum(per_class), 1.0)
    return classes @ ((total - per_class) / total)


class GraphPrediction:
    unit = "graphs"
    head_patterns = ("post_mp.*",)  # the prediction head (--init_from_skip=head)

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.model_cfg = cfg.model

    def build_model(self, rngs: nnx.Rngs) -> nnx.Module:
        return GraphMamba(self.model_cfg, rngs=rngs)

    def make_dataset(self) -> Dataset:
        """The configured graphs, with Laplacian eigenpairs only when the model reads them."""
        data = self.cfg.data
        if not self.model_cfg.lap_pe_dim:
            data = dataclasses.replace(data, lap_pe_freqs=0)
        elif not data.lap_pe_freqs:
            raise DataError(
                f"model.lap_pe_dim={self.model_cfg.lap_pe_dim} needs Laplacian eigenpairs: set data.lap_pe_freqs > 0 "
                "(or model.lap_pe_dim=0)"
            )
        dataset = make_dataset(data, self.cfg.train)
        try:
            check_model_fits_data(self.model_cfg, dataset)
        except DataError:
            if hasattr(dataset, "close"):
                dataset.close()
            raise
        return dataset

    def items_per_batch(self) -> int:
        return self.cfg.train.batch_size

    def forward(self, model, batch: Batch, rngs=None) -> jax.Array:
        """(rows, num_outputs) float32: rows are the batch's padded nodes (node tasks) or graphs (graph tasks)."""
        return model(batch, rngs)

    def _rows(self, batch: Batch) -> tuple[jax.Array, jax.Array]:
        """(labels, mask) of the scored rows."""
        if self.model_cfg.task_level == "node":
            return batch["node_labels"], batch["node_mask"]
        return batch["graph_labels"], batch["graph_mask"]

    def loss_terms(self, model, batch: Batch, *, train: bool, rngs=None) -> tuple[jax.Array, dict[str, jax.Array]]:
        out = self.forward(model, batch, rngs)
        labels, mask = self._rows(batch)
        kind = self.model_cfg.task_type
        if kind == "multiclass":
            smoothing = self.cfg.train.label_smoothing if train else 0.0
            loss = cross_entropy(out, labels, smoothing)
            hit = (jnp.argmax(out, axis=-1) == labels).astype(jnp.float32) * mask
            classes = jax.nn.one_hot(labels, out.shape[-1], dtype=jnp.float32) * mask[:, None]
            weight = class_weights(classes) if self.model_cfg.class_weighted_loss else mask
            return jnp.sum(loss * weight), {
                "count": jnp.sum(weight),
                "rows": jnp.sum(mask),
                "correct": jnp.sum(hit),
                "class_total": jnp.sum(classes, axis=0),
                "class_correct": jnp.sum(classes * hit[:, None], axis=0),
            }
        targets = labels.astype(jnp.float32)
        entries = jnp.sum(mask) * out.shape[-1]
        if kind == "multilabel":
            loss = jnp.maximum(out, 0) - out * targets + jnp.log1p(jnp.exp(-jnp.abs(out)))  # BCE with logits
            positives, negatives = logit_histograms(out, targets, mask)
            return jnp.sum(loss * mask[:, None]), {
                "count": entries,
                "ap_positives": positives,
                "ap_negatives": negatives,
            }
        error = jnp.sum(jnp.abs(out - targets) * mask[:, None])
        return error, {"count": entries, "abs_error": error}

    def train_metrics(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        if self.model_cfg.task_type == "multiclass":
            return {"accuracy": sums["correct"] / jnp.maximum(sums["rows"], 1.0)}
        return {}

    def eval_metrics(self, loss_sum: float, sums: dict) -> dict[str, float]:
        count = max(float(sums["count"]), 1e-30)  # the loss's normalizer: rows, entries or summed class weights
        metrics = {"eval_loss": loss_sum / count}
        kind = self.model_cfg.task_type
        if kind == "multiclass":
            metrics["eval_accuracy"] = float(sums["correct"]) / max(float(sums["rows"]), 1.0)
            if self.model_cfg.task_level == "node":
                metrics["eval_balanced_accuracy"] = balanced_accuracy(sums["class_correct"], sums["class_total"])
        elif kind == "multilabel":
            metrics["eval_ap"] = average_precision(sums["ap_positives"], sums["ap_negatives"])
        else:
            metrics["eval_mae"] = float(sums["abs_error"]) / count
        return metrics

    def weight_decay_mask(self, params: dict[str, jax.Array]) -> dict[str, bool]:
        """GraphGPS's AdamW decays every parameter (it passes model.parameters() as one group): so do we."""
        return dict.fromkeys(params, True)


def check_model_fits_data(m, dataset) -> None:
    """DataError naming the ``--model.<field>=<value>`` override when the model section does not fit the data."""
    problems = [(name, getattr(dataset, name)) for name in _MATCHED if getattr(m, name) != getattr(dataset, name)]
    if m.task_type == "multiclass" and m.num_outputs < dataset.num_outputs:
        problems.append(("num_outputs", dataset.num_outputs))
    if m.task_type != "multiclass" and m.num_outputs != dataset.num_outputs:
        problems.append(("num_outputs", dataset.num_outputs))
    if m.node_feature_kind == dataset.node_feature_kind == "dense" and m.node_in_dim != dataset.node_in_dim:
        problems.append(("node_in_dim", dataset.node_in_dim))
    if m.edge_feature_kind == dataset.edge_feature_kind == "dense" and m.edge_in_dim != dataset.edge_in_dim:
        problems.append(("edge_in_dim", dataset.edge_in_dim))
    for prefix in ("node", "edge"):
        vocab, data_vocab = getattr(m, f"{prefix}_vocab"), list(getattr(dataset, f"{prefix}_vocab") or [])
        kind = getattr(m, f"{prefix}_feature_kind")
        if kind == "categorical" and (
            len(vocab) != len(data_vocab) or any(a < b for a, b in zip(vocab, data_vocab, strict=False))
        ):
            problems.append((f"{prefix}_vocab", data_vocab))
    if problems:
        fixes = " ".join(f"--model.{name}={_flag(value)}" for name, value in problems)
        raise DataError(f"the model section does not fit the data {dataset.describe().get('source', '')}: set {fixes}")


def _flag(value) -> str:
    return (
        "[" + ",".join(str(int(v)) for v in value) + "]" if isinstance(value, list | tuple | np.ndarray) else str(value)
    )
