"""The graph task's objective: GraphGPS's class-weighted cross-entropy against its definition, accuracy counted
over rows (not weights), and the config checks around it."""

import jax.numpy as jnp
import numpy as np
import pytest

from jax_mamba.configs import load_config
from jax_mamba.tasks.graph import GraphPrediction, class_weights


def test_class_weights_follow_the_batch_class_counts(rng):
    labels = rng.integers(0, 5, 40)
    labels[labels == 3] = 4  # one class absent
    mask = (rng.uniform(size=40) < 0.7).astype(np.float32)  # unscored (padding) rows
    classes = np.eye(5, dtype=np.float32)[labels] * mask[:, None]
    scored = labels[mask > 0]
    per_class = np.bincount(scored, minlength=5)
    expected = (len(scored) - per_class[labels]) / len(scored) * mask
    np.testing.assert_allclose(np.asarray(class_weights(jnp.asarray(classes))), expected, rtol=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
def test_multiclass_loss_terms(rng, weighted):
    cfg = load_config("graph-mamba-tiny", [f"--model.class_weighted_loss={str(weighted).lower()}"])
    task = GraphPrediction(cfg)
    rows, classes = 30, cfg.model.num_outputs
    logits = rng.normal(size=(rows, classes)).astype(np.float32)
    labels = rng.integers(0, classes, rows).astype(np.int32)
    mask = (np.arange(rows) < 23).astype(np.float32)
    batch = {"node_labels": jnp.asarray(labels), "node_mask": jnp.asarray(mask)}
    loss_sum, sums = task.loss_terms(lambda b, r=None: jnp.asarray(logits), batch, train=False)
    real = mask > 0
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -log_p[np.arange(rows), labels][real]
    if weighted:
        per_class = np.bincount(labels[real], minlength=classes)
        w = (real.sum() - per_class[labels[real]]) / real.sum()
        expected = np.sum(w * nll) / np.sum(w)
    else:
        expected = nll.mean()
    np.testing.assert_allclose(float(loss_sum / sums["count"]), expected, rtol=1e-5)
    assert float(sums["rows"]) == 23
    correct = np.sum((logits.argmax(-1) == labels)[real])
    metrics = task.eval_metrics(float(loss_sum), {k: np.asarray(v) for k, v in sums.items()})
    assert metrics["eval_accuracy"] == pytest.approx(correct / 23)
    assert metrics["eval_loss"] == pytest.approx(expected, rel=1e-5)


def test_weighted_loss_refuses_label_smoothing():
    with pytest.raises(ValueError, match=r"train\.label_smoothing"):
        load_config("graph-mamba-cluster", ["--label_smoothing=0.1"])
