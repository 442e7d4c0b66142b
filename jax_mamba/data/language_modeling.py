"""Next-token prediction on a byte corpus: random windows of L + 1 bytes (inputs, targets shifted by one)."""

import numpy as np

from jax_mamba.data.batches import EVAL_STREAM, Batch, step_rng
from jax_mamba.data.corpus import ByteCorpus, DataError


class ByteLMDataset:
    vocab_size = 256
    metric = "bits_per_byte"

    def __init__(self, corpus: ByteCorpus, *, batch_size: int, seq_len: int, seed: int, eval_batches: int):
        for split, tokens in (("train", corpus.train), ("validation", corpus.val)):
            if len(tokens) < seq_len + 1:
                raise DataError(
                    f"the {split} split of {corpus.source} has {len(tokens)} bytes; train.seq_len={seq_len} needs at "
                    f"least {seq_len + 1} (use a shorter seq_len or more data)"
                )
        self.corpus = corpus
        self.batch_size, self.seq_len, self.seed = batch_size, seq_len, seed
        self._eval = [
            self._windows(corpus.val, np.random.default_rng([seed, EVAL_STREAM, i])) for i in range(eval_batches)
        ]

    def _windows(self, tokens: np.ndarray, rng: np.random.Generator) -> Batch:
        starts = rng.integers(0, len(tokens) - self.seq_len, size=self.batch_size)
        windows = tokens[starts[:, None] + np.arange(self.seq_len + 1)].astype(np.int32)
        return {
            "inputs": windows[:, :-1],
            "targets": windows[:, 1:],
            "mask": np.ones((self.batch_size, self.seq_len), np.float32),
        }

    def train_batch(self, step: int, accum: int) -> Batch:
        micro = [self._windows(self.corpus.train, step_rng(self.seed, step, m)) for m in range(accum)]
        return {k: np.stack([b[k] for b in micro]) for k in micro[0]}

    def eval_batches(self) -> list[Batch]:
        return self._eval

    def describe(self) -> dict:
        c = self.corpus
        return {
            "kind": "bytes",
            "source": c.source,
            "files": c.files,
            "train_bytes": len(c.train),
            "val_bytes": len(c.val),
        }
