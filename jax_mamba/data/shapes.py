"""The embedded image set: ten classes of simple shapes, generated offline and deterministically, big enough to show
a small model learning (no download, no dependency).

Each image is one shape in a random bright colour on a random dark background, at a random position and size,
with Gaussian pixel noise. The classes differ only in geometry: disk, square, triangle, plus, ring, horizontal bar,
vertical bar, diamond, X and two dots; colour and position carry no information."""

import numpy as np

CLASSES = ("disk", "square", "triangle", "plus", "ring", "hbar", "vbar", "diamond", "x", "dots")
CONTENT_SEED = 20_241_122  # the set's content is fixed; the training seed only changes the batch order


def _mask(kind: str, dy: np.ndarray, dx: np.ndarray, r: float) -> np.ndarray:
    """Pixels inside shape ``kind`` of size ``r`` at offsets (dy, dx) from its centre (image units)."""
    ady, adx = np.abs(dy), np.abs(dx)
    arm = 0.35 * r
    if kind == "disk":
        return dy**2 + dx**2 <= r**2
    if kind == "square":
        return (ady <= 0.8 * r) & (adx <= 0.8 * r)
    if kind == "triangle":
        return (dy <= 0.8 * r) & (dy >= -0.8 * r) & (adx <= (dy + 0.8 * r) * 0.6)
    if kind == "plus":
        return ((ady <= arm) & (adx <= r)) | ((adx <= arm) & (ady <= r))
    if kind == "ring":
        d2 = dy**2 + dx**2
        return (d2 <= r**2) & (d2 >= (0.55 * r) ** 2)
    if kind == "hbar":
        return (ady <= arm) & (adx <= r)
    if kind == "vbar":
        return (adx <= arm) & (ady <= r)
    if kind == "diamond":
        return ady + adx <= r
    if kind == "x":
        return ((np.abs(dy - dx) <= arm) | (np.abs(dy + dx) <= arm)) & (ady <= 0.8 * r) & (adx <= 0.8 * r)
    if kind == "dots":
        return ((dy**2 + (dx - 0.55 * r) ** 2) <= (0.4 * r) ** 2) | ((dy**2 + (dx + 0.55 * r) ** 2) <= (0.4 * r) ** 2)
    raise ValueError(f"unknown shape {kind!r}")


def render_shapes(count: int, image_size: int, seed: int = CONTENT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (count, image_size, image_size, 3), labels int32 (count,)), classes in turn, deterministic."""
    rng = np.random.default_rng(seed)
    grid = (np.arange(image_size) + 0.5) / image_size
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    images = np.empty((count, image_size, image_size, 3), np.uint8)
    labels = np.arange(count, dtype=np.int32) % len(CLASSES)
    for i, label in enumerate(labels):
        r = rng.uniform(0.22, 0.38)
        cy, cx = rng.uniform(r, 1 - r, size=2)
        background = rng.uniform(0.0, 0.35, 3)  # dark
        foreground = rng.uniform(0.6, 1.0, 3)  # bright
        inside = _mask(CLASSES[label], yy - cy, xx - cx, r)
        picture = np.where(inside[..., None], foreground, background)
        picture = picture + rng.normal(0, 0.06, picture.shape)
        images[i] = np.clip(np.round(picture * 255), 0, 255).astype(np.uint8)
    return images, labels
