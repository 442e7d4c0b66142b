"""Graph-task scores that evaluation accumulates as sums over batches: per-class hits (balanced accuracy, the
benchmarking-GNNs "accuracy-SBM") and per-target score histograms (average precision, as OGB/LRGB compute it).

Average precision is not a sum of per-sample terms, so each batch adds its samples to histograms of positives and
negatives over ``AP_BINS`` bins of the logit in [-AP_LOGIT_RANGE, AP_LOGIT_RANGE] (a monotone score, so the
ranking is kept up to the bin width); AP is then computed from the histograms with tied scores per bin, as
sklearn treats ties. It equals the exact AP whenever no positive and negative share a bin."""

import jax
import jax.numpy as jnp
import numpy as np

AP_BINS = 4096
AP_LOGIT_RANGE = 16.0


def logit_histograms(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """logits, labels (rows, T), mask (rows,) -> (positives, negatives) (T, AP_BINS) float32 counts."""
    scaled = (logits.astype(jnp.float32) + AP_LOGIT_RANGE) * (AP_BINS / (2 * AP_LOGIT_RANGE))
    bins = jnp.clip(jnp.floor(scaled), 0, AP_BINS - 1).astype(jnp.int32)
    onehot = jax.nn.one_hot(bins, AP_BINS, dtype=jnp.float32) * mask[:, None, None]  # (rows, T, bins)
    positive = labels.astype(jnp.float32)[..., None]
    return jnp.sum(onehot * positive, axis=0), jnp.sum(onehot * (1.0 - positive), axis=0)


def average_precision(positives: np.ndarray, negatives: np.ndarray) -> float:
    """Mean over targets that have both positives and negatives of the AP from (T, bins) histograms (nan if none)."""
    scores = []
    for pos, neg in zip(np.asarray(positives, np.float64), np.asarray(negatives, np.float64), strict=True):
        if pos.sum() == 0 or neg.sum() == 0:
            continue
        tp, fp = np.cumsum(pos[::-1]), np.cumsum(neg[::-1])  # thresholds from the highest bin down
        hits = pos[::-1] > 0
        scores.append(float(np.sum(pos[::-1][hits] / pos.sum() * tp[hits] / (tp[hits] + fp[hits]))))
    return float(np.mean(scores)) if scores else float("nan")


def balanced_accuracy(correct: np.ndarray, total: np.ndarray) -> float:
    """Mean over classes present of the per-class accuracy."""
    correct, total = np.asarray(correct, np.float64), np.asarray(total, np.float64)
    present = total > 0
    return float(np.mean(correct[present] / total[present])) if present.any() else float("nan")
