"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus) sampling."""

from dataclasses import dataclass

import jax
import jax.numpy as jnp


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 (or top_k 1) is greedy; top_k 0 and top_p 1.0 keep the whole vocabulary. Top-k applies before
    top-p, both to the temperature-scaled logits, as in mamba-ssm's ``sample``."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def validate(self) -> "SamplingConfig":
        if not isinstance(self.temperature, int | float) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {self.temperature!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0: no top-k filter), got {self.top_k!r}")
        if not isinstance(self.top_p, int | float) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1: no nucleus filter), got {self.top_p!r}")
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


def sample_tokens(logits: jax.Array, key: jax.Array, sampling: SamplingConfig, vocab_size: int) -> jax.Array:
    """logits (batch, padded vocab) -> token ids (batch,) int32 below ``vocab_size`` (the padding entries of the
    LM head never win)."""
    logits = logits.astype(jnp.float32)
    logits = jnp.where(jnp.arange(logits.shape[-1]) < vocab_size, logits, -jnp.inf)
    if sampling.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / sampling.temperature
    if 0 < sampling.top_k < vocab_size:
        kth = jax.lax.top_k(logits, sampling.top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if sampling.top_p < 1:
        ordered = -jnp.sort(-logits, axis=-1)  # descending
        probs = jax.nn.softmax(ordered, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # the mass of the tokens ranked above each one
        kept = jnp.where(before < sampling.top_p, ordered, jnp.inf)  # the top token always has before = 0
        logits = jnp.where(logits < jnp.min(kept, axis=-1, keepdims=True), -jnp.inf, logits)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)
