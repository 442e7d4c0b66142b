"""Tokenized corpora: token ids in memory-mapped flat files (nanoGPT/Megatron style), or text tokenized on load.

A token folder holds ``train.bin`` and ``val.bin`` (flat little-endian uint16 ids, uint32 beyond 65536 tokens) and
``meta.json`` (dtype, vocab_size, tokenizer, eos_id, source); ``python -m jax_mamba.data.tokenize`` writes one.
A bare ``.bin`` file of ids is read too (its last ``val_fraction`` is validation). Documents are separated by the
tokenizer's end-of-text id where it has one."""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jax_mamba.data.corpus import SEPARATOR, ByteCorpus, DataError
from jax_mamba.data.tokenizer import HFTokenizer

META_FILE, TRAIN_FILE, VAL_FILE = "meta.json", "train.bin", "val.bin"


@dataclass
class TokenCorpus:
    train: np.ndarray  # uint16/uint32 ids (memory-mapped when read from files)
    val: np.ndarray
    vocab_size: int  # ids are below it
    source: str
    tokenizer: str | None  # the tokenizer.json that wrote the ids, when known
    eos_id: int | None


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def encode_documents(tokenizer: HFTokenizer, text_bytes: bytes, batch: int = 1024) -> np.ndarray:
    """NUL-separated documents (a ByteCorpus split) -> their ids, joined by the tokenizer's eos id if it has one."""
    docs = [d.decode("utf-8", errors="replace") for d in text_bytes.split(SEPARATOR) if d]
    sep = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    ids: list[int] = []
    for start in range(0, len(docs), batch):
        for encoded in tokenizer.encode_batch(docs[start : start + batch]):
            ids += encoded + sep
    return np.asarray(ids, token_dtype(tokenizer.vocab_size))


def tokenize_corpus(corpus: ByteCorpus, tokenizer_path: str) -> TokenCorpus:
    """A byte corpus (stdlib or a user's text) tokenized in memory with a tokenizer.json."""
    tokenizer = HFTokenizer(tokenizer_path)
    train, val = (encode_documents(tokenizer, split.tobytes()) for split in (corpus.train, corpus.val))
    source = f"{corpus.source} tokenized by {tokenizer.name}"
    return TokenCorpus(train, val, tokenizer.vocab_size, source, tokenizer.name, tokenizer.eos_id)


def write_meta(folder: Path, dtype: np.dtype, vocab_size: int, tokenizer: str | None, eos_id, source: str) -> None:
    meta = {"dtype": dtype.name, "vocab_size": vocab_size, "tokenizer": tokenizer, "eos_id": eos_id, "source": source}
    (folder / META_FILE).write_text(json.dumps(meta, indent=2))


def load_token_files(path: str, val_fraction: float, bare_dtype: str) -> TokenCorpus:
    """A token folder (train.bin, val.bin, meta.json) or a bare .bin file of ``bare_dtype`` ids, memory-mapped."""
    root = Path(path).expanduser()
    if root.is_dir():
        missing = [n for n in (TRAIN_FILE, VAL_FILE, META_FILE) if not (root / n).is_file()]
        if missing:
            raise DataError(
                f"data.path {path!r} lacks {missing}: a token folder holds train.bin, val.bin and meta.json "
                "(python -m jax_mamba.data.tokenize writes them)"
            )
        meta = json.loads((root / META_FILE).read_text())
        dtype = np.dtype(meta["dtype"])
        train, val = (_memmap(root / n, dtype) for n in (TRAIN_FILE, VAL_FILE))
        return TokenCorpus(train, val, int(meta["vocab_size"]), str(root), meta.get("tokenizer"), meta.get("eos_id"))
    if not root.is_file():
        raise DataError(f"data.path {path!r} does not exist (expected a token folder or a .bin file of token ids)")
    ids = _memmap(root, np.dtype(bare_dtype))
    cut = round(len(ids) * (1 - val_fraction))
    return TokenCorpus(ids[:cut], ids[cut:], int(ids.max()) + 1, str(root), None, None)


def _memmap(file: Path, dtype: np.dtype) -> np.ndarray:
    size = file.stat().st_size
    if size == 0 or size % dtype.itemsize:
        raise DataError(f"{file} holds {size} bytes: not a whole, non-empty number of {dtype.name} token ids")
    return np.memmap(file, dtype=dtype, mode="r")
