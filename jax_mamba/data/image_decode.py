"""Decoding image files into training or evaluation crops, a chunk of samples per call: the unit of work that the
image-folder loader hands to its worker processes (or threads). Imports neither JAX nor the rest of the package's
heavy modules, so a spawned worker starts in a fraction of a second.

A training sample's augmentation draws come from ``(seed, AUGMENT_STREAM, position)``, its global sample position:
the same file at the same position gets the same crop in any worker, on any run."""

from dataclasses import dataclass

import numpy as np
from PIL import Image

from jax_mamba.data.image_transforms import eval_transform, load_image, train_transform

AUGMENT_STREAM = 1_000_033  # seed-sequence entry of the per-sample augmentation draws


@dataclass(frozen=True)
class CropSettings:
    """What a worker needs to turn a file into a crop (picklable)."""

    image_size: int
    crop_pct: float
    min_scale: float
    hflip: float
    seed: int


def augmentation_rng(seed: int, position: int) -> np.random.Generator:
    return np.random.default_rng([seed, AUGMENT_STREAM, position])


def decode_chunk(samples: list[tuple[str, int | None]], settings: CropSettings) -> tuple[np.ndarray, list[str | None]]:
    """``samples``: (path, training position, or None for the evaluation transform). Returns the crops, uint8
    (len(samples), image_size, image_size, 3), and per sample None or why the file could not be read (that crop is
    then zeros; the caller applies the stop/skip policy)."""
    size = settings.image_size
    images = np.zeros((len(samples), size, size, 3), np.uint8)
    errors: list[str | None] = [None] * len(samples)
    for k, (path, position) in enumerate(samples):
        try:
            image = load_image(path)
            if position is None:
                images[k] = eval_transform(image, size, settings.crop_pct)
            else:
                rng = augmentation_rng(settings.seed, position)
                images[k] = train_transform(image, size, settings.min_scale, settings.hflip, rng)
        except (OSError, ValueError, Image.DecompressionBombError) as err:
            errors[k] = f"{type(err).__name__}: {err}"
    return images, errors
