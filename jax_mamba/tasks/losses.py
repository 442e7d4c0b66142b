"""Losses and scores over class logits, float32."""

import jax
import jax.numpy as jnp


def cross_entropy(logits: jax.Array, labels: jax.Array, smoothing: float = 0.0) -> jax.Array:
    """Per-position cross-entropy of logits (..., classes) against int labels (...); with label smoothing the
    target is 1 - smoothing on the label plus smoothing / classes on every class (torch's ``label_smoothing``).
    Computed from the log-partition function, without a one-hot (vocabularies are large)."""
    logits = logits.astype(jnp.float32)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    nll = log_z - jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    if smoothing == 0.0:
        return nll
    return (1.0 - smoothing) * nll + smoothing * (log_z - jnp.mean(logits, axis=-1))


def top_k_correct(logits: jax.Array, labels: jax.Array, k: int) -> jax.Array:
    """1.0 where fewer than k logits exceed the label's (ties in its favour), else 0.0; shape of labels."""
    k = min(k, logits.shape[-1])
    label_logit = jnp.take_along_axis(logits, labels[..., None], axis=-1)
    rank = jnp.sum(logits > label_logit, axis=-1)
    return (rank < k).astype(jnp.float32)
