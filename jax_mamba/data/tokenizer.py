"""Tokenizers for the language models: bytes (the embedded default: ids 0-255 are the UTF-8 bytes, NUL separates
documents) or a Hugging Face ``tokenizer.json`` read with the ``tokenizers`` library (GPT-NeoX's for mamba-ssm's
checkpoints)."""

from pathlib import Path
from typing import Protocol

from jax_mamba.data.corpus import SEPARATOR, DataError

# Names of the end-of-text token in common tokenizer.json files, tried in order for ``eos_id``.
EOS_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")


class Tokenizer(Protocol):
    name: str
    vocab_size: int
    eos_id: int | None  # the document separator the model learned, if any

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids; decoding replaces invalid byte sequences (a model can emit any byte)."""

    name = "bytes"
    vocab_size = 256
    eos_id = SEPARATOR[0]

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class HFTokenizer:
    """A ``tokenizer.json`` (Hugging Face ``tokenizers`` format), e.g. GPT-NeoX's 50277-token BPE."""

    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer as _Tokenizer

        file = Path(path).expanduser()
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise DataError(f"tokenizer {str(path)!r} not found (expected a tokenizer.json file or a folder with one)")
        try:
            self._tok = _Tokenizer.from_file(str(file))
        except Exception as err:  # the library raises its own exception type for malformed files
            raise DataError(f"tokenizer {str(file)!r} is not a readable tokenizer.json: {err}") from err
        self.name = str(file)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eos_id = next((i for t in EOS_TOKENS if (i := self._tok.token_to_id(t)) is not None), None)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


def load_tokenizer(path: str | Path | None) -> Tokenizer:
    """``ByteTokenizer()`` for None, else the tokenizer.json at ``path`` (a file, or a folder holding one)."""
    return ByteTokenizer() if path is None else HFTokenizer(path)
