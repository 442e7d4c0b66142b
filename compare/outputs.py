"""Where a benchmark's files go: ``--out`` is a prefix that each file extends with its own suffix."""

from pathlib import Path


def output_path(prefix: Path | str, suffix: str) -> Path:
    """``prefix`` + ``suffix`` (e.g. ``.json``). Not ``Path.with_suffix``: a prefix such as ``mamba2-2.7b-fsdp`` would
    lose ``.7b-fsdp`` and every config with a dot in its name would write to the same ``mamba2-2`` files."""
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + suffix)
