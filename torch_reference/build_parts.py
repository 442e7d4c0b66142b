"""The built CUDA extensions carried between machines: every build folder's manifest and .so files as one xz-compressed
tar split into parts (``torch-build.tar.xz.part-aa``, ``-ab``, ...), small enough to carry and readable by
``cat parts | xz -d | tar -x``. ``python -m torch_reference.build --export DIR`` writes them after a build,
``--import DIR`` unpacks them before one (which then reuses what they hold); ``python -m torch_reference.build_parts
export|import DIR`` does either alone.
"""

import argparse
import io
import itertools
import lzma
import string
import sys
import tarfile
from pathlib import Path

from torch_reference.paths import cache_dir

PREFIX = "torch-build.tar.xz.part-"
PART_BYTES = 15 * 2**20


def _suffixes():
    """aa, ab, ..., zz: split(1)'s names, so that sorting the names orders the parts."""
    return ("".join(pair) for pair in itertools.product(string.ascii_lowercase, repeat=2))


def export_parts(out: Path, part_bytes: int = PART_BYTES) -> list[Path]:
    """Every build folder's manifest.json and extension .so files under the cache's build/ into ``out``'s parts."""
    root = cache_dir() / "build"
    files = sorted(f for f in root.glob("*/manifest.json") if f.is_file())
    files += sorted(f for f in root.glob("*/*/*.so") if f.is_file())
    if not files:
        raise FileNotFoundError(f"no build to export under {root} (run python -m torch_reference.build first)")
    buffer = io.BytesIO()
    with lzma.open(buffer, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for file in files:
            tar.add(file, arcname=str(file.relative_to(root)))
    data = buffer.getvalue()
    suffixes = list(_suffixes())
    if len(data) > len(suffixes) * part_bytes:
        raise ValueError(f"{len(data)} bytes need more than {len(suffixes)} parts of {part_bytes} bytes")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(PREFIX + "*"):
        old.unlink()
    parts = []
    for start, suffix in zip(range(0, len(data), part_bytes), suffixes, strict=False):
        parts.append(out / (PREFIX + suffix))
        parts[-1].write_bytes(data[start : start + part_bytes])
    return parts


def import_parts(folder: Path) -> list[str]:
    """The parts in ``folder`` unpacked into the cache's build/; returns the files' paths there."""
    parts = sorted(folder.glob(PREFIX + "*"))
    if not parts:
        raise FileNotFoundError(f"no {PREFIX}* files in {folder} (written by python -m torch_reference.build --export)")
    data = b"".join(part.read_bytes() for part in parts)
    root = cache_dir() / "build"
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(data)), mode="r") as tar:
        tar.extractall(root, filter="data")
        return tar.getnames()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_reference.build_parts", description=__doc__)
    parser.add_argument("action", choices=("export", "import"))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.action == "export":
        print(f"exported {len(export_parts(args.folder))} parts to {args.folder}")
    else:
        print(f"imported {len(import_parts(args.folder))} files from {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
