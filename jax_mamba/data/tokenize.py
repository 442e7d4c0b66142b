"""Command line: ``python -m jax_mamba.data.tokenize --tokenizer tokenizer.json --input PATH --out DIR``.

Writes a token folder (``token_files``: train.bin, val.bin, meta.json) from a text file or a folder of text files,
one file at a time (memory holds one file's text and ids), with a progress bar. The split follows the byte corpora's
rule: files go to validation by a hash of their relative path; a single file's last ``--val_fraction`` of bytes is
validation. Train with it: ``python -m jax_mamba.train --config NAME --data DIR``."""

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from jax_mamba.data.corpus import DataError, is_validation_file, looks_binary, text_files
from jax_mamba.data.token_files import TRAIN_FILE, VAL_FILE, encode_documents, token_dtype, write_meta
from jax_mamba.data.tokenizer import HFTokenizer


def tokenize_to_folder(tokenizer_path: str, source: str, out: str, val_fraction: float, progress: bool = True) -> dict:
    """Tokenize ``source`` into the token folder ``out`` (created; existing token files are refused, never
    overwritten). Returns the token counts per split."""
    tokenizer = HFTokenizer(tokenizer_path)
    root, folder = Path(source).expanduser(), Path(out).expanduser()
    if not root.exists():
        raise DataError(f"--input {source!r} does not exist (expected a text file or a folder of text files)")
    if any((folder / n).exists() for n in (TRAIN_FILE, VAL_FILE)):
        raise DataError(f"--out {out!r} already holds token files; choose another folder (nothing was overwritten)")
    if not 0 < val_fraction < 1:
        raise DataError(f"--val_fraction must be in (0, 1), got {val_fraction}")
    folder.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(tokenizer.vocab_size)
    counts = {"train": 0, "val": 0}
    files = [root] if root.is_file() else text_files(root)
    partial = {n: folder / f"{n}.partial" for n in (TRAIN_FILE, VAL_FILE)}  # renamed into place once complete
    written = False
    try:
        _write(tokenizer, root, files, val_fraction, partial, dtype, counts, progress)
        written = True
    finally:  # an interrupted or empty result leaves nothing behind
        complete = written and counts["train"] > 0 and counts["val"] > 0
        for name, file in partial.items():
            if complete:
                file.rename(folder / name)
            else:
                file.unlink(missing_ok=True)
    if not complete:
        raise DataError(
            f"--input {source!r} gave {counts['train']} training and {counts['val']} validation tokens: both must be "
            "non-empty (add files, or pass a single file, which is split by bytes)"
        )
    write_meta(folder, dtype, tokenizer.vocab_size, tokenizer.name, tokenizer.eos_id, str(root))
    return counts


def _write(tokenizer, root: Path, files: list[Path], val_fraction: float, partial: dict, dtype, counts, progress):
    with open(partial[TRAIN_FILE], "wb") as train, open(partial[VAL_FILE], "wb") as val:
        for path in tqdm(files, desc="tokenizing", unit="file", disable=not progress):
            data = path.read_bytes()
            if not data or looks_binary(data):
                continue
            if root.is_file():
                cut = round(len(data) * (1 - val_fraction))
                parts = {"train": data[:cut], "val": data[cut:]}
            else:
                parts = {
                    "val" if is_validation_file(path.relative_to(root).as_posix(), val_fraction) else "train": data
                }
            for split, text in parts.items():
                ids = encode_documents(tokenizer, text).astype(dtype)
                ids.tofile(train if split == "train" else val)
                counts[split] += len(ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jax_mamba.data.tokenize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", required=True, help="a tokenizer.json (Hugging Face tokenizers format)")
    parser.add_argument("--input", required=True, help="a text file or a folder of text files")
    parser.add_argument("--out", required=True, help="the token folder to write")
    parser.add_argument("--val_fraction", type=float, default=0.05)
    args = parser.parse_args(argv)
    try:
        counts = tokenize_to_folder(args.tokenizer, args.input, args.out, args.val_fraction)
    except DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.out}: {counts['train']:,} training and {counts['val']:,} validation tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
