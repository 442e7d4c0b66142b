"""Byte-level corpora: the embedded default (the Python standard library's own sources) and a user's text file or
folder. Files are split into train/val by a hash of their relative path (deterministic, stable as files are added);
a single file is split by bytes (the last ``val_fraction`` is validation). Documents are joined by a NUL byte."""

import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEPARATOR = b"\x00"


class DataError(ValueError):
    """Missing, empty or unusable data, with the path and what was expected."""


@dataclass
class ByteCorpus:
    train: np.ndarray  # uint8
    val: np.ndarray  # uint8
    source: str
    files: int


def is_validation_file(relative: str, val_fraction: float) -> bool:
    return zlib.crc32(relative.encode()) % 10_000 < val_fraction * 10_000


def looks_binary(data: bytes) -> bool:
    return b"\x00" in data[:8192]


def _split_files(root: Path, files: list[Path], val_fraction: float, source: str) -> ByteCorpus:
    train, val = [], []
    for path in files:
        data = path.read_bytes()
        if not data or looks_binary(data):
            continue
        (val if is_validation_file(path.relative_to(root).as_posix(), val_fraction) else train).append(data)
    if not train and not val:
        raise DataError(f"data.path {source!r} holds no text: no non-empty, non-binary files")
    if not train or not val:  # too few files to split by file: split the concatenation by bytes instead
        return _split_bytes(SEPARATOR.join(train + val), val_fraction, source, len(train) + len(val))
    as_array = lambda parts: np.frombuffer(SEPARATOR.join(parts), np.uint8)  # noqa: E731
    return ByteCorpus(as_array(train), as_array(val), source, len(train) + len(val))


def _split_bytes(data: bytes, val_fraction: float, source: str, files: int) -> ByteCorpus:
    array = np.frombuffer(data, np.uint8)
    cut = round(len(array) * (1 - val_fraction))
    return ByteCorpus(array[:cut], array[cut:], source, files)


def text_files(root: Path) -> list[Path]:
    """Every non-hidden file under a folder, sorted by path (binary ones are skipped when read)."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def stdlib_corpus(val_fraction: float) -> ByteCorpus:
    """Every ``.py`` file of this interpreter's standard library (site-packages excluded), sorted by path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "__pycache__" not in p.parts)
    if not files:
        raise DataError(f"no Python standard library sources found under {root}")
    return _split_files(root, files, val_fraction, f"python-stdlib:{root}")


def text_corpus(path: str, val_fraction: float) -> ByteCorpus:
    """A text file, or every non-hidden, non-binary file under a folder (sorted by path), as bytes."""
    root = Path(path).expanduser()
    if not root.exists():
        raise DataError(f"data.path {path!r} does not exist (expected a text file or a folder of text files)")
    if root.is_file():
        data = root.read_bytes()
        if not data:
            raise DataError(f"data.path {path!r} is empty")
        return _split_bytes(data, val_fraction, str(root), 1)
    files = text_files(root)
    if not files:
        raise DataError(f"data.path {path!r} is an empty folder (expected text files in it)")
    return _split_files(root, files, val_fraction, str(root))
