"""RandAugment on the device, as timm's ``rand-m9-mstd0.5-inc1`` (the policy NVlabs train MambaVision with): each
image gets ``n`` operations in turn, each drawn uniformly from timm's fifteen (with replacement) and applied with
probability 0.5 at a magnitude drawn from N(m, mstd) clipped to [0, 10]. The operations act on 0-255 pixel values and
return whole values, as PIL's do on uint8 images (to within one level: tests/jax_mamba/test_rand_augment.py);
geometric ones sample bilinearly and fill what comes from outside the image with the normalization mean's color
(timm's ``img_mean``).

Every image's operation runs as one of three per-image transforms, each the identity unless that operation was
drawn: an affine resampling (rotate, shear, translate), a 256-entry lookup table per channel (autocontrast,
equalize, invert, posterize, solarize, solarize-add) and a blend with a degenerate image (color, contrast,
brightness, sharpness). A layer so costs the same whatever was drawn and no image waits on another's branch.

The policy: ``configs.schema.rand_augment_policy``. Layout: images (batch, H, W, 3) float32 holding whole values in
[0, 255]."""

import math

import jax
import jax.numpy as jnp

from jax_mamba.configs.schema import RandAugmentPolicy

# timm's operation lists, in its order (the "increasing" set: a larger magnitude is always a stronger change)
OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
    "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY",
)  # fmt: skip
_OP = {name: i for i, name in enumerate(OPS)}
APPLY_PROB = 0.5  # timm's per-operation probability in RandAugment
MAX_MAGNITUDE = 10.0
ROTATE_DEGREES = 30.0  # at magnitude 10
SHEAR = 0.3
TRANSLATE_FRACTION = 0.45  # timm's translate_pct: of the image side
SOLARIZE_ADD = 110
ENHANCE_SPAN = 0.9  # increasing enhancements: factor 1 +- 0.9 x level, at least 0.1
SMOOTH = ((1, 1, 1), (1, 5, 1), (1, 1, 1))  # PIL's ImageFilter.SMOOTH (divided by 13), the sharpness degenerate


def rand_augment(key: jax.Array, images: jax.Array, policy: RandAugmentPolicy, fill: jax.Array) -> jax.Array:
    """``images`` (batch, H, W, 3) float32 of whole values in [0, 255] after ``policy.layers`` random operations
    each; ``fill`` (3,): the color geometric operations bring in from outside the image."""
    batch = images.shape[0]
    for layer_key in jax.random.split(key, policy.layers):
        k_op, k_apply, k_magnitude, k_sign = jax.random.split(layer_key, 4)
        op = jax.random.randint(k_op, (batch,), 0, len(OPS))
        op = jnp.where(jax.random.uniform(k_apply, (batch,)) < APPLY_PROB, op, -1)  # -1: this layer leaves it
        magnitude = jnp.full((batch,), policy.magnitude, jnp.float32)
        if policy.magnitude_std > 0:
            magnitude = magnitude + policy.magnitude_std * jax.random.normal(k_magnitude, (batch,))
        level = jnp.clip(magnitude, 0.0, MAX_MAGNITUDE) / MAX_MAGNITUDE
        sign = jnp.where(jax.random.bernoulli(k_sign, 0.5, (batch,)), -1.0, 1.0)
        images = apply_operations(images, op, level, sign, policy.increasing, fill)
    return images


def apply_operations(
    images: jax.Array, op: jax.Array, level: jax.Array, sign: jax.Array, increasing: bool, fill: jax.Array
) -> jax.Array:
    """One operation an image: ``op`` (batch,) int, an index into ``OPS`` or -1 for none; ``level`` (batch,) the
    magnitude / 10 in [0, 1]; ``sign`` (batch,) +-1, the direction of rotations, shears, translations and
    (increasing set) enhancements. ``images`` and ``fill`` as in ``rand_augment``."""
    images = _resample(images, _affine(op, level, sign, images.shape[1:3]), fill)
    images = _lookup(images, _tables(images, op, level, increasing))
    return _blend(images, op, level, sign, increasing)


def _is(op: jax.Array, *names: str) -> jax.Array:
    return jnp.isin(op, jnp.asarray([_OP[n] for n in names]))


def _affine(op, level, sign, size) -> jax.Array:
    """(batch, 2, 3): each output pixel center (x, y, 1) maps to the input point it samples (the identity unless a
    geometric operation was drawn). Rotation turns the picture counter-clockwise by +-30 x level degrees about the
    center; shears move x by s x y (y by s x x) with s = +-0.3 x level; translations move by +-0.45 x level of the
    side (PIL's affine transforms, as timm calls them)."""
    height, width = size
    angle = jnp.where(_is(op, "Rotate"), sign * level * math.radians(ROTATE_DEGREES), 0.0)
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    cx, cy = (width - 1) / 2, (height - 1) / 2
    shear_x = jnp.where(_is(op, "ShearX"), sign * level * SHEAR, 0.0)
    shear_y = jnp.where(_is(op, "ShearY"), sign * level * SHEAR, 0.0)
    move_x = jnp.where(_is(op, "TranslateX"), sign * level * TRANSLATE_FRACTION * width, 0.0)
    move_y = jnp.where(_is(op, "TranslateY"), sign * level * TRANSLATE_FRACTION * height, 0.0)
    # rotation's inverse about the center, then shear and translation (at most one of the three is not the identity)
    a, b = cos, -sin + shear_x
    d, e = sin + shear_y, cos
    c = cx - cos * cx + sin * cy + move_x
    f = cy - sin * cx - cos * cy + move_y
    return jnp.stack([jnp.stack([a, b, c], -1), jnp.stack([d, e, f], -1)], 1)


def _resample(images, affine, fill) -> jax.Array:
    """Bilinear samples at each image's affine map of the pixel grid, points outside the image reading ``fill``;
    rounded to whole values. Exact where the map is the identity (every weight 0 or 1)."""
    batch, height, width, channels = images.shape
    ys, xs = jnp.meshgrid(jnp.arange(height, dtype=jnp.float32), jnp.arange(width, dtype=jnp.float32), indexing="ij")
    grid = jnp.stack([xs.ravel(), ys.ravel(), jnp.ones(height * width)], 0)  # (3, H*W)
    x_in, y_in = jnp.einsum("bij,jp->bip", affine, grid, precision=jax.lax.Precision.HIGHEST).transpose(1, 0, 2)
    x0, y0 = jnp.floor(x_in), jnp.floor(y_in)
    flat = images.reshape(batch, height * width, channels)
    out = jnp.zeros_like(flat)
    for dy in (0, 1):
        for dx in (0, 1):
            x, y = x0 + dx, y0 + dy
            weight = (1 - jnp.abs(x_in - x)) * (1 - jnp.abs(y_in - y))  # (batch, H*W)
            inside = (x >= 0) & (x < width) & (y >= 0) & (y < height)
            index = (jnp.clip(y, 0, height - 1) * width + jnp.clip(x, 0, width - 1)).astype(jnp.int32)
            value = jnp.take_along_axis(flat, index[..., None], axis=1)
            out = out + weight[..., None] * jnp.where(inside[..., None], value, fill)
    return jnp.clip(jnp.round(out), 0, 255).reshape(images.shape)


def _tables(images, op, level, increasing: bool) -> jax.Array:
    """(batch, channels, 256) lookup tables: the identity, or the drawn operation's (PIL's ImageOps arithmetic)."""
    batch, _, _, channels = images.shape
    values = jnp.arange(256, dtype=jnp.float32)
    pixels = images.reshape(batch, -1, channels).astype(jnp.int32)
    # autocontrast: each channel's range stretched to [0, 255] (a flat channel is left alone)
    low, high = jnp.min(images, axis=(1, 2))[..., None], jnp.max(images, axis=(1, 2))[..., None]
    scale = 255.0 / jnp.maximum(high - low, 1.0)
    stretched = jnp.where(high > low, jnp.clip(jnp.trunc(values * scale - low * scale), 0, 255), values)
    # equalize: PIL's cumulative histogram steps (identity for one distinct value or too few pixels)
    counts = jax.vmap(jax.vmap(lambda p: jnp.bincount(p, length=256), in_axes=1))(pixels)  # (batch, channels, 256)
    top = jnp.max(jnp.where(counts > 0, values.astype(jnp.int32), -1), axis=-1, keepdims=True)
    top_count = jnp.take_along_axis(counts, top, axis=-1)
    step = (jnp.sum(counts, axis=-1, keepdims=True) - top_count) // 255
    below = jnp.cumsum(counts, axis=-1) - counts
    equalized = jnp.where(step > 0, jnp.minimum((step // 2 + below) // jnp.maximum(step, 1), 255), values)
    level = level[:, None, None]
    bits = (4 - jnp.floor(level * 4)) if increasing else jnp.floor(level * 4)  # posterize: bits kept
    dropped = 2.0 ** (8 - bits)
    threshold = (256 - jnp.floor(level * 256)) if increasing else jnp.floor(level * 256)  # solarize
    added = jnp.floor(level * SOLARIZE_ADD)
    candidates = {
        "AutoContrast": stretched,
        "Equalize": equalized.astype(jnp.float32),
        "Invert": 255 - values,
        "Posterize": jnp.floor(values / dropped) * dropped,
        "Solarize": jnp.where(values >= threshold, 255 - values, values),
        "SolarizeAdd": jnp.where(values < 128, jnp.minimum(values + added, 255), values),
    }
    table = jnp.broadcast_to(values, (batch, channels, 256))
    for name, candidate in candidates.items():
        table = jnp.where(_is(op, name)[:, None, None], candidate, table)
    return table


def _lookup(images, tables) -> jax.Array:
    batch, channels = images.shape[0], images.shape[-1]
    index = images.reshape(batch, -1, channels).astype(jnp.int32).transpose(0, 2, 1)  # (batch, channels, H*W)
    looked_up = jnp.take_along_axis(tables, index, axis=-1)
    return looked_up.transpose(0, 2, 1).reshape(images.shape)


def _blend(images, op, level, sign, increasing: bool) -> jax.Array:
    """PIL's ImageEnhance: degenerate + factor x (image - degenerate), truncated and clipped (PIL's uint8 result);
    the degenerate image is the grayscale (color), its mean (contrast), black (brightness) or the smoothed image
    (sharpness). The factor is 1 (the identity) unless one of them was drawn."""
    if increasing:
        factor = jnp.maximum(1.0 + sign * level * ENHANCE_SPAN, 0.1)
    else:
        factor = level * 1.8 + 0.1
    factor = jnp.where(_is(op, "Color", "Contrast", "Brightness", "Sharpness"), factor, 1.0)[:, None, None, None]
    red, green, blue = images[..., 0:1], images[..., 1:2], images[..., 2:3]
    gray = jnp.floor((red * 19595 + green * 38470 + blue * 7471 + 0x8000) / 65536)  # PIL's "L" conversion
    mean_gray = jnp.floor(jnp.mean(gray, axis=(1, 2, 3), keepdims=True) + 0.5)
    smooth = jnp.asarray(SMOOTH, jnp.float32)[:, :, None, None] * jnp.ones((1, 1, 1, images.shape[-1]))
    smoothed = jax.lax.conv_general_dilated(
        images, smooth / 13.0, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=images.shape[-1], precision=jax.lax.Precision.HIGHEST,
    )  # fmt: skip
    smoothed = images.at[:, 1:-1, 1:-1].set(jnp.round(smoothed))  # PIL's filter leaves the border pixels
    degenerate = jnp.where(_is(op, "Color")[:, None, None, None], gray, images)
    degenerate = jnp.where(_is(op, "Contrast")[:, None, None, None], mean_gray, degenerate)
    degenerate = jnp.where(_is(op, "Brightness")[:, None, None, None], 0.0, degenerate)
    degenerate = jnp.where(_is(op, "Sharpness")[:, None, None, None], smoothed, degenerate)
    return jnp.clip(jnp.floor(degenerate + factor * (images - degenerate)), 0, 255)  # PIL truncates
