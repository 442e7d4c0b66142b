"""The Mamba paper's synthetic tasks (section 4.1), scored by accuracy on the answer positions.

Selective copying: ``num_tokens_to_copy`` data tokens (1..num_symbols) scattered among blanks (0) in the first
L - K positions, then K copy markers; at each marker the model must output the data tokens in order.
Induction heads: random tokens (0..num_symbols-1) with a trigger token placed once, followed by the answer token;
the sequence ends with the trigger again, and the model must output the answer there."""

import numpy as np

from jax_mamba.data.batches import EVAL_STREAM, Batch, step_rng
from jax_mamba.data.corpus import DataError


class _SyntheticTask:
    metric = "accuracy"

    def __init__(self, *, batch_size: int, seq_len: int, seed: int, eval_batches: int):
        self.batch_size, self.seq_len, self.seed = batch_size, seq_len, seed
        self._eval = [self.sample(np.random.default_rng([seed, EVAL_STREAM, i])) for i in range(eval_batches)]

    def sample(self, rng: np.random.Generator) -> Batch:
        raise NotImplementedError

    def train_batch(self, step: int, accum: int) -> Batch:
        micro = [self.sample(step_rng(self.seed, step, m)) for m in range(accum)]
        return {k: np.stack([b[k] for b in micro]) for k in micro[0]}

    def eval_batches(self) -> list[Batch]:
        return self._eval


class SelectiveCopying(_SyntheticTask):
    def __init__(self, *, num_symbols: int, num_tokens_to_copy: int, **kw):
        seq_len = kw["seq_len"]
        if seq_len < 2 * num_tokens_to_copy:
            raise DataError(
                f"selective copying needs train.seq_len >= 2 * data.num_tokens_to_copy "
                f"= {2 * num_tokens_to_copy}, got {seq_len}"
            )
        self.num_symbols, self.copy = num_symbols, num_tokens_to_copy
        self.vocab_size = num_symbols + 2  # blank 0, data 1..num_symbols, marker num_symbols + 1
        super().__init__(**kw)

    def sample(self, rng: np.random.Generator) -> Batch:
        b, length, k = self.batch_size, self.seq_len, self.copy
        region = length - k
        tokens = rng.integers(1, self.num_symbols + 1, size=(b, k))
        positions = np.sort(np.argsort(rng.random((b, region)), axis=1)[:, :k], axis=1)
        inputs = np.zeros((b, length), np.int32)
        np.put_along_axis(inputs, positions, tokens, axis=1)
        inputs[:, region:] = self.num_symbols + 1
        targets = np.zeros((b, length), np.int32)
        targets[:, region:] = tokens
        mask = np.zeros((b, length), np.float32)
        mask[:, region:] = 1.0
        return {"inputs": inputs, "targets": targets, "mask": mask}

    def describe(self) -> dict:
        return {"kind": "selective_copying", "num_symbols": self.num_symbols, "num_tokens_to_copy": self.copy}


class InductionHeads(_SyntheticTask):
    def __init__(self, *, num_symbols: int, **kw):
        if kw["seq_len"] < 4:
            raise DataError(f"induction heads needs train.seq_len >= 4, got {kw['seq_len']}")
        self.num_symbols = num_symbols
        self.vocab_size = num_symbols + 1  # data 0..num_symbols-1, trigger num_symbols
        super().__init__(**kw)

    def sample(self, rng: np.random.Generator) -> Batch:
        b, length = self.batch_size, self.seq_len
        trigger = self.num_symbols
        inputs = rng.integers(0, self.num_symbols, size=(b, length)).astype(np.int32)
        answers = rng.integers(0, self.num_symbols, size=b)
        where = rng.integers(0, length - 2, size=b)  # trigger at where, answer at where + 1 < L - 1
        rows = np.arange(b)
        inputs[rows, where] = trigger
        inputs[rows, where + 1] = answers
        inputs[:, -1] = trigger
        targets = np.zeros((b, length), np.int32)
        targets[:, -1] = answers
        mask = np.zeros((b, length), np.float32)
        mask[:, -1] = 1.0
        return {"inputs": inputs, "targets": targets, "mask": mask}

    def describe(self) -> dict:
        return {"kind": "induction_heads", "num_symbols": self.num_symbols}
