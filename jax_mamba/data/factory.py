"""Build the dataset a run's config asks for."""

from jax_mamba.configs.schema import DataConfig, TrainConfig
from jax_mamba.data.batches import Dataset
from jax_mamba.data.corpus import DataError, stdlib_corpus, text_corpus
from jax_mamba.data.language_modeling import ByteLMDataset
from jax_mamba.data.synthetic import InductionHeads, SelectiveCopying

__all__ = ["DataError", "make_dataset"]


def make_dataset(data: DataConfig, train: TrainConfig) -> Dataset:
    common = dict(batch_size=train.batch_size, seq_len=train.seq_len, seed=train.seed, eval_batches=train.eval_batches)
    if data.kind == "stdlib":
        return ByteLMDataset(stdlib_corpus(data.val_fraction), **common)
    if data.kind == "text":
        if not data.path:
            raise DataError("data.kind 'text' needs data.path (a text file or folder); pass --data PATH")
        return ByteLMDataset(text_corpus(data.path, data.val_fraction), **common)
    if data.kind == "selective_copying":
        return SelectiveCopying(num_symbols=data.num_symbols, num_tokens_to_copy=data.num_tokens_to_copy, **common)
    if data.kind == "induction_heads":
        return InductionHeads(num_symbols=data.num_symbols, **common)
    raise DataError(f"data.kind must be one of stdlib, text, selective_copying, induction_heads; got {data.kind!r}")
