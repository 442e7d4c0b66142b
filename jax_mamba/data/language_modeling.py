"""Next-token prediction on a corpus of bytes or token ids: random windows of L + 1 tokens (inputs, targets
shifted by one). Token corpora may be memory-mapped: a batch reads only its windows."""

import numpy as np

from jax_mamba.data.batches import EVAL_STREAM, Batch, step_rng
from jax_mamba.data.corpus import ByteCorpus, DataError
from jax_mamba.data.token_files import TokenCorpus


class TokenLMDataset:
    def __init__(self, corpus: TokenCorpus, *, batch_size: int, seq_len: int, seed: int, eval_batches: int):
        self.vocab_size, self.metric, self.unit = corpus.vocab_size, "perplexity", "tokens"
        self._init(corpus, batch_size, seq_len, seed, eval_batches)

    def _init(self, corpus, batch_size: int, seq_len: int, seed: int, eval_batches: int) -> None:
        for split, tokens in (("train", corpus.train), ("validation", corpus.val)):
            if len(tokens) < seq_len + 1:
                raise DataError(
                    f"the {split} split of {corpus.source} has {len(tokens)} {self.unit}; train.seq_len={seq_len} "
                    f"needs at least {seq_len + 1} (use a shorter seq_len or more data)"
                )
        self.corpus = corpus
        self.batch_size, self.seq_len, self.seed = batch_size, seq_len, seed
        self._eval = [
            self._windows(corpus.val, np.random.default_rng([seed, EVAL_STREAM, i])) for i in range(eval_batches)
        ]

    def _windows(self, tokens: np.ndarray, rng: np.random.Generator, rows: slice = slice(None)) -> Batch:
        """A batch's ``rows`` of random windows: every row's start is drawn, only these rows' tokens are read."""
        starts = rng.integers(0, len(tokens) - self.seq_len, size=self.batch_size)[rows]
        windows = tokens[starts[:, None] + np.arange(self.seq_len + 1)].astype(np.int32)
        return {
            "inputs": windows[:, :-1],
            "targets": windows[:, 1:],
            "mask": np.ones((len(starts), self.seq_len), np.float32),
        }

    def train_batch(self, step: int, accum: int) -> Batch:
        return self.train_batch_rows(step, accum, 0, self.batch_size)

    def train_batch_rows(self, step: int, accum: int, start: int, stop: int) -> Batch:
        """Rows [start, stop) of ``train_batch(step, accum)`` (one process's share of a multi-process run), reading
        only their windows."""
        rows = slice(start, stop)
        micro = [self._windows(self.corpus.train, step_rng(self.seed, step, m), rows) for m in range(accum)]
        return {k: np.stack([b[k] for b in micro]) for k in micro[0]}

    def eval_batches(self) -> list[Batch]:
        return self._eval

    def describe(self) -> dict:
        c = self.corpus
        return {
            "kind": "tokens",
            "source": c.source,
            "vocab_size": c.vocab_size,
            "tokenizer": c.tokenizer,
            "train_tokens": len(c.train),
            "val_tokens": len(c.val),
        }


class ByteLMDataset(TokenLMDataset):
    """Bytes as tokens (vocabulary 256), scored in bits per byte."""

    def __init__(self, corpus: ByteCorpus, *, batch_size: int, seq_len: int, seed: int, eval_batches: int):
        self.vocab_size, self.metric, self.unit = 256, "bits_per_byte", "bytes"
        self._init(corpus, batch_size, seq_len, seed, eval_batches)

    def describe(self) -> dict:
        c = self.corpus
        return {
            "kind": "bytes",
            "source": c.source,
            "files": c.files,
            "train_bytes": len(c.train),
            "val_bytes": len(c.val),
        }
