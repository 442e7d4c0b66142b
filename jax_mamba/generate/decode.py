"""Batched generation: prefill the prompts with the chunked kernels, then one jit-compiled decoding loop.

Prompts of different lengths share one loop: the common prefix (the shortest prompt) is prefilled in parallel, and
the loop feeds each row its own prompt tokens until they run out, then the sampled ones. So every row stays at the
same position (one attention cache index for all) and each row's result is exact, whatever the layer kinds.
"""

import functools
import weakref
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jax_mamba.generate.sampling import SamplingConfig, sample_tokens
from jax_mamba.modules.impl import compute_dtype_for


@dataclass
class Generation:
    """tokens (batch, max_new_tokens) int32: each row's generated tokens, eos_id repeated after a row's eos;
    lengths (batch,): tokens generated per row, its eos included."""

    tokens: np.ndarray
    lengths: np.ndarray


def generate(
    model: nnx.Module,
    prompts: np.ndarray | list[list[int]],
    max_new_tokens: int,
    *,
    sampling: SamplingConfig | None = None,
    seed: int = 0,
    eos_id: int | None = None,
    state_dtype: str = "float32",
) -> Generation:
    """Continue each prompt by up to ``max_new_tokens`` tokens with a language model (``MambaLMHeadModel``: Mamba-1,
    Mamba-2 or hybrid layers).

    prompts: a list of token-id lists (lengths may differ, each >= 1) or an int array (batch, L). Stops early once
    every row has produced ``eos_id`` (when given). Compiles once per (batch, longest prompt, shortest prompt,
    max_new_tokens, sampling, state_dtype) and never per token. ``sampling`` defaults to ``SamplingConfig()``
    (temperature 1). ``state_dtype``: the SSM layers' recurrent state between steps, one of ``STATE_DTYPES``;
    "float32" (default) keeps the prefill's state exactly, "bfloat16" halves the bytes each step reads and writes
    (what mamba-ssm's generate keeps for a bf16 model; the step's arithmetic stays float32)."""
    rows = [list(map(int, p)) for p in prompts]
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("prompts must hold at least one prompt, each of at least one token")
    vocab_size = model.cfg.vocab_size
    flat = np.concatenate([np.asarray(r) for r in rows])
    if flat.min() < 0 or flat.max() >= vocab_size:
        raise ValueError(f"prompt token ids must be in [0, vocab_size={vocab_size}), got {flat.min()}..{flat.max()}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if eos_id is not None and not 0 <= eos_id < vocab_size:
        raise ValueError(f"eos_id must be in [0, vocab_size={vocab_size}), got {eos_id}")
    if state_dtype not in STATE_DTYPES:
        raise ValueError(f"state_dtype must be one of {STATE_DTYPES}, got {state_dtype!r}")
    sampling = (sampling or SamplingConfig()).validate()
    lengths = np.array([len(r) for r in rows], np.int32)
    padded = np.zeros((len(rows), lengths.max()), np.int32)
    for i, r in enumerate(rows):
        padded[i, : len(r)] = r
    graphdef, state = nnx.split(model)
    state = _matrices_in_compute_dtype(state, compute_dtype_for(model.cfg))
    if model not in _COMPILED:  # one jitted loop per model object (its graph is not hashable: no static argument)
        _COMPILED[model] = jax.jit(functools.partial(_decode, graphdef), static_argnums=(4, 5, 6, 7, 8, 9))
    tokens, counts = _COMPILED[model](
        state, jnp.asarray(padded), jnp.asarray(lengths), jax.random.key(seed),
        int(lengths.min()), max_new_tokens, sampling, vocab_size, eos_id, state_dtype,
    )  # fmt: skip
    return Generation(np.asarray(tokens), np.asarray(counts))


STATE_DTYPES = ("float32", "bfloat16")
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
CAST_PARAMS = ("kernel", "embedding")  # the matrices every use casts to the compute dtype (Linear, Embedding)


def _matrices_in_compute_dtype(state: nnx.State, dtype) -> nnx.State:
    """The Linear kernels and the embedding in the compute dtype, as each use casts them anyway: the same
    arithmetic, but a bf16 decoding step reads half the weight bytes (decoding at small batch is bound by them)."""

    def cast(path, value):
        name = path[-2].key if len(path) > 1 and hasattr(path[-2], "key") else None
        return value.astype(dtype) if name in CAST_PARAMS and jnp.issubdtype(value.dtype, jnp.floating) else value

    return jax.tree_util.tree_map_with_path(cast, state)


def ssm_states_as(caches: list[dict], dtype) -> list[dict]:
    """The layers' caches (``prefill``'s) with each SSM layer's state ("ssm") cast to ``dtype``; the steps then
    keep that dtype. Attention layers' caches pass unchanged."""
    return [{**c, "ssm": c["ssm"].astype(dtype)} if "ssm" in c else c for c in caches]


def _decode(graphdef, state, prompts, lengths, key, min_len, max_new, sampling, vocab_size, eos_id, state_dtype):
    """Positions min_len .. L + max_new - 1 are chosen in one while loop: a row's prompt token while it has one,
    else a sample; each choice is then fed to the model's step. Returns (tokens, lengths) as ``Generation``."""
    model = nnx.merge(graphdef, state)
    batch, longest = prompts.shape
    steps = longest + max_new - min_len
    logits, caches = model.prefill(prompts[:, :min_len], max_len=longest + max_new)
    caches = ssm_states_as(caches, state_dtype)
    stop = -1 if eos_id is None else eos_id

    def running(carry):
        i, _, _, _, _, finished = carry
        return (i < steps) & ~jnp.all(finished)

    def body(carry):
        i, logits, caches, key, chosen, finished = carry
        pos = min_len + i
        key, draw = jax.random.split(key)
        prompt_token = jax.lax.dynamic_index_in_dim(prompts, jnp.minimum(pos, longest - 1), 1, keepdims=False)
        generated = pos >= lengths
        token = jnp.where(generated, sample_tokens(logits, draw, sampling, vocab_size), prompt_token)
        token = jnp.where(finished, stop, token)
        chosen = jax.lax.dynamic_update_index_in_dim(chosen, token, i, 1)
        finished = finished | (generated & ((token == stop) | (pos - lengths + 1 >= max_new)))
        logits, caches = model.step(jnp.maximum(token, 0), caches, pos)  # a finished row's -1: any valid id
        return i + 1, logits, caches, key, chosen, finished

    chosen = jnp.full((batch, steps), stop, jnp.int32)
    init = (jnp.int32(0), logits, caches, key, chosen, jnp.zeros((batch,), bool))
    _, _, _, _, chosen, _ = jax.lax.while_loop(running, body, init)
    starts = lengths - min_len
    tokens = jax.vmap(lambda row, s: jax.lax.dynamic_slice_in_dim(row, s, max_new))(chosen, starts)
    ended = tokens == stop
    first_end = jnp.where(ended.any(axis=1), jnp.argmax(ended, axis=1) + 1, max_new)
    return tokens, first_end.astype(jnp.int32)
