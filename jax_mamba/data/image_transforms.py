"""Decoding and the standard ImageNet transforms on the host, to uint8 (size, size, 3) arrays (normalization
happens on the device).

- train: random resized crop (torchvision's ``RandomResizedCrop``: area fraction in [min_scale, 1], aspect ratio
  log-uniform in [3/4, 4/3], ten tries then a centre crop), bicubic resize, horizontal flip with probability hflip;
- eval: bicubic resize of the shorter side to ``size / crop_pct``, centre crop (timm's eval transform).
"""

import math

import numpy as np
from PIL import Image

RATIO = (3 / 4, 4 / 3)


def random_resized_box(
    width: int, height: int, min_scale: float, rng: np.random.Generator
) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of a random crop, torchvision's RandomResizedCrop.get_params."""
    area = width * height
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(min_scale, 1.0)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left = int(rng.integers(0, width - w + 1))
            top = int(rng.integers(0, height - h + 1))
            return left, top, left + w, top + h
    ratio = width / height  # fallback: the largest centred crop within the ratio range
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        w, h = round(height * RATIO[1]), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def train_transform(image: Image.Image, size: int, min_scale: float, hflip: float, rng: np.random.Generator):
    """A random crop resized to (size, size), maybe flipped: uint8 (size, size, 3)."""
    box = random_resized_box(image.width, image.height, min_scale, rng)
    out = np.asarray(image.convert("RGB").resize((size, size), Image.Resampling.BICUBIC, box=box))
    return out[:, ::-1] if rng.uniform() < hflip else out


def eval_transform(image: Image.Image, size: int, crop_pct: float) -> np.ndarray:
    """Shorter side resized to size / crop_pct, centre (size, size) crop: uint8 (size, size, 3)."""
    scale = math.floor(size / crop_pct) / min(image.width, image.height)
    width, height = max(size, round(image.width * scale)), max(size, round(image.height * scale))
    resized = image.convert("RGB").resize((width, height), Image.Resampling.BICUBIC)
    left, top = (width - size) // 2, (height - size) // 2
    return np.asarray(resized.crop((left, top, left + size, top + size)))


def load_image(path: str) -> Image.Image:
    """Open and decode an image file (raises OSError, e.g. PIL.UnidentifiedImageError, if it is unreadable)."""
    image = Image.open(path)
    image.load()
    return image
