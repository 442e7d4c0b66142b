"""Language modeling (family ``lm``): mamba-ssm's ``MambaLMHeadModel`` on byte-level text or the synthetic tasks,
next-token cross-entropy over the masked positions."""

import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import PartitionSpec as P

from jax_mamba.configs.schema import RunConfig
from jax_mamba.data import Batch, DataError, Dataset, make_dataset
from jax_mamba.models import MambaLMHeadModel
from jax_mamba.modules.per_device import batch_axes, batch_devices, batch_spec, context_size, position_axes
from jax_mamba.tasks.losses import cross_entropy

_DECAYED_SUFFIXES = (".kernel", ".embedding", "conv1d.weight")


LOSS_CHUNK_TOKENS = 8192  # positions per chunk of the LM head and loss when chunking is automatic
LOSS_CHUNK_ABOVE_BYTES = 4 * 2**30  # automatic chunking where a micro-batch's float32 logits would exceed this


def lm_loss_chunk(configured: int, positions: int, vocab: int, devices: int = 1) -> int:
    """Positions per chunk of the LM head and loss, over all ``devices`` that share the ``positions``: each device's
    share is ``configured`` (train.loss_chunk_tokens) if set, else LOSS_CHUNK_TOKENS where its float32 (positions,
    vocab) logits would exceed LOSS_CHUNK_ABOVE_BYTES, else all of its positions (one chunk: mamba2-130m at batch
    8 x 2048 has 3.3 GB of them). So a device computes the same chunks on a mesh as alone with its own batch. Never
    more than ``positions``."""
    own = -(-positions // devices)
    if configured:
        share = configured
    else:
        share = LOSS_CHUNK_TOKENS if own * vocab * 4 > LOSS_CHUNK_ABOVE_BYTES else own
    return min(share * devices, positions)


def loss_chunks(t: jax.Array, chunk: int, strided: bool) -> jax.Array:
    """``t`` (rows, length, ...) as chunks of at most ``chunk`` positions (padded with zeros: mask them), stacked on a
    new leading axis. ``strided``: chunk j holds position i * chunks + j of every row, (chunks, rows, length /
    chunks, ...), so that rows split over devices (data, fsdp) and positions split over them (context: the outer
    factor) stay split inside each chunk and every device computes only its share of each. Else whole rows' runs of
    positions one after another, (chunks, chunk, ...): on a mesh each such chunk is held by few devices."""
    rows, length = t.shape[:2]
    if strided:
        count, per_row = strided_chunks(rows, length, chunk)
        padded = jnp.pad(t, [(0, 0), (0, count * per_row - length)] + [(0, 0)] * (t.ndim - 2))
        return jnp.moveaxis(padded.reshape(rows, per_row, count, *t.shape[2:]), 2, 0)
    flat = t.reshape(rows * length, *t.shape[2:])
    flat = jnp.pad(flat, [(0, -(rows * length) % chunk)] + [(0, 0)] * (t.ndim - 2))
    return flat.reshape(-1, chunk, *t.shape[2:])


def strided_chunks(rows: int, length: int, chunk: int) -> tuple[int, int]:
    """(chunks, positions of each row per chunk) for the LM head and loss over ``rows`` sequences of ``length`` in
    chunks of at most ``chunk`` positions in all (at least one position of every row): as few chunks as that allows,
    a divisor of ``length`` where one is near (up to twice as many chunks), so that no padding is needed."""
    count = -(-length // max(1, chunk // rows))
    count = next((n for n in range(count, min(2 * count, length) + 1) if length % n == 0), count)
    return count, -(-length // count)


def head_loss_sums(
    hidden: jax.Array,
    targets: jax.Array,
    mask: jax.Array,
    weight: jax.Array,
    *,
    configured: int,
    smoothing: float,
    devices: int = 1,
    strided: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """(summed masked NLL, summed masked correct argmax) of the LM head ``hidden @ weight`` over hidden (rows, L,
    d_model), targets (rows, L) int and mask (rows, L) float32, weight (d_model, vocab) in hidden's dtype. The
    logits (float32) are made one chunk of ``lm_loss_chunk(configured, positions, vocab, devices)`` positions at a
    time and recomputed in the backward; ``strided`` picks the chunks' layout (``loss_chunks``)."""
    rows, length = hidden.shape[:2]
    chunk = lm_loss_chunk(configured, rows * length, weight.shape[1], devices)

    def chunk_sums(h, t, m):
        logits = (h @ weight).astype(jnp.float32)
        nll = cross_entropy(logits, t, smoothing)
        correct = (jnp.argmax(logits, axis=-1) == t).astype(jnp.float32)
        return jnp.sum(nll * m), jnp.sum(correct * m)

    if chunk == rows * length:
        return chunk_sums(hidden, targets, mask)
    split = functools.partial(loss_chunks, chunk=chunk, strided=strided)
    remat_sums = jax.checkpoint(chunk_sums)  # the backward recomputes each chunk's logits
    step = lambda carry, xs: (jax.tree.map(jnp.add, carry, remat_sums(*xs)), None)  # noqa: E731
    zero = jnp.zeros((), jnp.float32)
    sums, _ = jax.lax.scan(step, (zero, zero), (split(hidden), split(targets), split(mask)))
    return sums


class LanguageModeling:
    unit = "tokens"
    # what depends on the vocabulary (--init_from_skip=head): the LM head and the embedding it may be tied to
    head_patterns = ("lm_head.*", "backbone.embedding.*")

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        text = cfg.data.kind in ("stdlib", "text", "tokens")
        bytes_ = text and cfg.data.kind != "tokens" and not cfg.data.tokenizer
        self.metric = "bits_per_byte" if bytes_ else "perplexity" if text else "accuracy"

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
        scored count and the correct argmax predictions. Logits are float32 before the softmax. The LM head and
        the loss run over chunks of positions (``lm_loss_chunk``: train.loss_chunk_tokens), each chunk's logits
        recomputed in the backward, so that at long context the (positions, vocab) logits never exist whole.

        On a mesh that splits the batch's positions (data, fsdp, context axes) each device runs the head and loss on
        its own positions under ``shard_map`` (``head_loss_sums``), with the whole head weight, and the sums are
        added over the devices. Left to XLA's partitioner, the chunk loop's transpose all-reduced the head's weight
        gradient (a (d_model, vocab) array) once per chunk, and chunks of whole rows made every device compute the
        LM head of the whole batch; per device the weight gradient is reduced once, after the loop. The exception
        is a pure FSDP mesh left to XLA (``mesh.fsdp_gather="xla"``), where the partitioner splits the head's matmul
        over the vocabulary (the weight stays split) and whole-row chunks need less memory (CPU compiles, 790m
        width)."""
        smoothing = self.cfg.train.label_smoothing if train else 0.0
        configured = self.cfg.train.loss_chunk_tokens
        weight = model.head_weight()
        hidden = model.backbone(batch["inputs"]).astype(weight.dtype)
        targets, mask = batch["targets"], batch["mask"].astype(jnp.float32)
        axes, context = batch_axes(), context_size()
        sums = functools.partial(head_loss_sums, configured=configured, smoothing=smoothing)
        if axes == ("fsdp",) and context == 1 and self.cfg.mesh.fsdp_gather == "xla":
            nll_sum, correct_sum = sums(hidden, targets, mask, weight, devices=batch_devices(), strided=False)
        elif axes or context > 1:
            split, over = batch_spec(), position_axes()  # read here: inside shard_map these axes are manual
            local = lambda *args: jax.lax.psum(sums(*args), over)  # noqa: E731
            per_device = jax.shard_map(local, in_specs=(split, split, split, P()), out_specs=P(), check_vma=False)
            nll_sum, correct_sum = per_device(hidden, targets, mask, weight)
        else:
            nll_sum, correct_sum = sums(hidden, targets, mask, weight)
        return nll_sum, {"count": jnp.sum(mask), "correct": correct_sum}

    def train_metrics(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """Accuracy of a training step where the data is scored by it (the synthetic tasks)."""
        return {"accuracy": sums["correct"] / jnp.maximum(sums["count"], 1.0)} if self.metric == "accuracy" else {}

    def eval_metrics(self, loss_sum: float, sums: dict[str, float]) -> dict[str, float]:
        count = max(sums["count"], 1.0)
        loss = loss_sum / count
        result = {"eval_loss": loss, "eval_perplexity": math.exp(min(loss, 700.0))}
        if self.metric == "bits_per_byte":
            result["eval_bits_per_byte"] = loss / math.log(2)
        elif self.metric == "accuracy":
            result["eval_accuracy"] = sums["correct"] / count
        return result

    def weight_decay_mask(self, params: dict[str, jax.Array]) -> dict[str, bool]:
        """Decay Linear/Embedding/conv weights; never A_log, D, dt_bias, biases or norm weights (mamba-ssm's
        ``_no_weight_decay`` parameters and the usual GPT exclusions)."""
        return {name: name.endswith(_DECAYED_SUFFIXES) for name in params}
