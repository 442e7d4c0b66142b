"""Training data: byte-level corpora (the embedded Python-stdlib default, or a user's text), the Mamba paper's
synthetic tasks, and labelled images (the embedded shapes set, or a user's image folder). Every dataset yields
deterministic batches as a function of (seed, step), so a resumed run sees exactly the data an uninterrupted run
would have seen."""

from jax_mamba.data.batches import Batch, Dataset
from jax_mamba.data.factory import DataError, make_dataset

__all__ = ["Batch", "DataError", "Dataset", "make_dataset"]
