"""Write the embedded shapes set as an image folder: ``python -m jax_mamba.data.export_shapes DIR``.

ImageNet layout (``DIR/train/<class>/*.jpg``, ``DIR/val/<class>/*.jpg``): a ready example of what ``--data DIR``
reads, and JPEG files of a realistic size for measuring the image loader (``jax_mamba.data.loader_bench``)."""

import argparse
import sys
from pathlib import Path

from PIL import Image

from jax_mamba.data.shapes import CLASSES, render_shapes


def export(folder: Path, count: int, image_size: int, val_fraction: float = 0.1, fmt: str = "jpg") -> int:
    """Render ``count`` images and write them as files; returns the number written."""
    images, labels = render_shapes(count, image_size)
    cut = round(count * (1 - val_fraction))
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        split = "train" if i < cut else "val"
        target = folder / split / CLASSES[label]
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(target / f"{i:06d}.{fmt}", quality=90)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jax_mamba.data.export_shapes", description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--image_size", type=int, default=384)
    parser.add_argument("--val_fraction", type=float, default=0.1)
    parser.add_argument("--format", default="jpg", choices=["jpg", "png"])
    args = parser.parse_args(argv)
    n = export(args.folder, args.count, args.image_size, args.val_fraction, args.format)
    print(f"wrote {n} images of {args.image_size}px under {args.folder}/train and {args.folder}/val")
    return 0


if __name__ == "__main__":
    sys.exit(main())
