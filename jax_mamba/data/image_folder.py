"""A folder of labelled images, ImageNet layout: one subfolder per class holding its image files (JPEG, PNG, ...).

Either ``root/train/<class>/...`` and ``root/val/<class>/...`` (the given split), or ``root/<class>/...``, split
into train/validation by a hash of each file's relative path (deterministic, stable as files are added). Classes are
the sorted subfolder names of the training split; hidden files and folders and files that are not images (by
extension) are ignored."""

import zlib
from dataclasses import dataclass
from pathlib import Path

from jax_mamba.data.corpus import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
TRAIN_SPLITS = ("train",)
VAL_SPLITS = ("val", "validation")


@dataclass
class ImageFiles:
    classes: list[str]
    train: list[tuple[str, int]]  # (path, class index)
    val: list[tuple[str, int]]
    source: str


def _visible(path: Path, root: Path) -> bool:
    return not any(part.startswith(".") for part in path.relative_to(root).parts)


def _class_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def _images_in(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS and _visible(p, folder)
    )


def _scan(root: Path, what: str) -> dict[str, list[Path]]:
    """{class name: its image files} of one split folder; every class folder must hold images."""
    classes = _class_dirs(root)
    if not classes:
        raise DataError(f"data.path: {what} {str(root)!r} has no class subfolders (expected <class>/<image files>)")
    files = {c.name: _images_in(c) for c in classes}
    empty = [name for name, found in files.items() if not found]
    if empty:
        raise DataError(
            f"data.path: class folders {empty[:5]} under {str(root)!r} hold no image files "
            f"(extensions {', '.join(IMAGE_EXTENSIONS)})"
        )
    return files


def _named_split(root: Path, names: tuple[str, ...]) -> Path | None:
    return next((root / n for n in names if (root / n).is_dir()), None)


def scan_image_folder(path: str, val_fraction: float) -> ImageFiles:
    """The labelled files of ``path`` (see the module docstring), or a DataError naming what is wrong."""
    root = Path(path).expanduser()
    if not root.exists():
        raise DataError(f"data.path {path!r} does not exist (expected a folder of class subfolders of images)")
    if not root.is_dir():
        raise DataError(f"data.path {path!r} is a file; image data needs a folder of class subfolders")
    train_dir, val_dir = _named_split(root, TRAIN_SPLITS), _named_split(root, VAL_SPLITS)
    if train_dir is not None and val_dir is not None:
        train_files, val_files = _scan(train_dir, "training split"), _scan(val_dir, "validation split")
        classes = sorted(train_files)
        unknown = sorted(set(val_files) - set(classes))
        if unknown:
            raise DataError(f"data.path: validation classes {unknown[:5]} are not among the training classes")
        index = {c: i for i, c in enumerate(classes)}
        train = [(str(p), index[c]) for c in classes for p in train_files[c]]
        val = [(str(p), index[c]) for c in sorted(val_files) for p in val_files[c]]
        return ImageFiles(classes, train, val, str(root))
    files = _scan(root, "folder")
    classes = sorted(files)
    train, val = [], []
    for label, name in enumerate(classes):
        for p in files[name]:
            key = p.relative_to(root).as_posix()
            (val if zlib.crc32(key.encode()) % 10_000 < val_fraction * 10_000 else train).append((str(p), label))
    if not train or not val:
        raise DataError(
            f"data.path {path!r}: {len(train) + len(val)} images are too few to split into train and validation "
            f"with data.val_fraction={val_fraction}"
        )
    return ImageFiles(classes, train, val, str(root))
