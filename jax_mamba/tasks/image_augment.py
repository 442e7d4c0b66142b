"""Batch augmentations of MambaVision's training recipe that run on the device, inside the train step, after the
images are normalized (as timm, which NVlabs train with, applies them): random erasing per image, then mixup or
cutmix over the batch. Their random draws come from the micro-batch's key, a function of (seed, step, micro-batch),
so a resumed run draws the same.

Layouts: images (batch, H, W, C) float, labels (batch,) int."""

import math

import jax
import jax.numpy as jnp

ERASE_AREA = (0.02, 1 / 3)  # the erased box's share of the image (timm's RandomErasing defaults)
ERASE_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))
ERASE_ATTEMPTS = 10  # boxes drawn per image; the first that fits is erased (none fits: the image is kept)


def random_erase(key: jax.Array, images: jax.Array, probability: float) -> jax.Array:
    """Each image, with ``probability``, gets one box (2-33% of its area, aspect 0.3-3.3) replaced by standard normal
    noise per pixel and channel (timm's ``RandomErasing(mode="pixel")`` on normalized images)."""
    batch, height, width, _ = images.shape
    k_apply, k_area, k_aspect, k_top, k_left, k_noise = jax.random.split(key, 6)
    draws = (batch, ERASE_ATTEMPTS)
    area = height * width * jax.random.uniform(k_area, draws, minval=ERASE_AREA[0], maxval=ERASE_AREA[1])
    aspect = jnp.exp(jax.random.uniform(k_aspect, draws, minval=ERASE_LOG_ASPECT[0], maxval=ERASE_LOG_ASPECT[1]))
    box_h = jnp.round(jnp.sqrt(area * aspect)).astype(jnp.int32)
    box_w = jnp.round(jnp.sqrt(area / aspect)).astype(jnp.int32)
    fits = (box_h < height) & (box_w < width)
    first = jnp.argmax(fits, axis=1)  # the first attempt that fits (0 when none does: masked out below)
    pick = lambda a: jnp.take_along_axis(a, first[:, None], axis=1)[:, 0]  # noqa: E731
    box_h, box_w, any_fits = pick(box_h), pick(box_w), jnp.any(fits, axis=1)
    top = jnp.floor(jax.random.uniform(k_top, (batch,)) * (height - box_h + 1)).astype(jnp.int32)
    left = jnp.floor(jax.random.uniform(k_left, (batch,)) * (width - box_w + 1)).astype(jnp.int32)
    erase = any_fits & (jax.random.uniform(k_apply, (batch,)) < probability)
    rows, cols = jnp.arange(height)[None, :, None], jnp.arange(width)[None, None, :]
    inside = (
        (rows >= top[:, None, None])
        & (rows < (top + box_h)[:, None, None])
        & (cols >= left[:, None, None])
        & (cols < (left + box_w)[:, None, None])
        & erase[:, None, None]
    )
    noise = jax.random.normal(k_noise, images.shape, jnp.float32).astype(images.dtype)
    return jnp.where(inside[..., None], noise, images)


def mix_batch(
    key: jax.Array, images: jax.Array, mixup_alpha: float, cutmix_alpha: float, switch_prob: float
) -> tuple[jax.Array, jax.Array]:
    """(mixed images, lam): each image mixed with the batch's image in reverse order (``images[::-1]``) by a share
    ``lam`` ~ Beta(alpha, alpha) drawn once for the batch (timm's "batch" mode). Mixup blends whole images; cutmix
    pastes a box of the other image covering 1 - lam of the area (``lam`` then corrected to the box actually
    pasted, clipped at the borders). With both alphas set, cutmix is chosen with ``switch_prob``. The targets are
    ``lam`` x one's labels + (1 - lam) x the reversed batch's."""
    k_choice, k_mixup, k_cutmix, k_y, k_x = jax.random.split(key, 5)
    _, height, width, _ = images.shape
    other = images[::-1]
    if mixup_alpha > 0 and cutmix_alpha > 0:
        use_cutmix = jax.random.uniform(k_choice) < switch_prob
    else:
        use_cutmix = jnp.asarray(cutmix_alpha > 0)
    lam_mixup = jax.random.beta(k_mixup, mixup_alpha, mixup_alpha) if mixup_alpha > 0 else jnp.float32(1.0)
    lam_cutmix = jax.random.beta(k_cutmix, cutmix_alpha, cutmix_alpha) if cutmix_alpha > 0 else jnp.float32(1.0)
    cut = jnp.sqrt(1.0 - lam_cutmix)
    cut_h, cut_w = (cut * height).astype(jnp.int32), (cut * width).astype(jnp.int32)
    center_y = jax.random.randint(k_y, (), 0, height)
    center_x = jax.random.randint(k_x, (), 0, width)
    y0, y1 = jnp.clip(center_y - cut_h // 2, 0, height), jnp.clip(center_y + cut_h // 2, 0, height)
    x0, x1 = jnp.clip(center_x - cut_w // 2, 0, width), jnp.clip(center_x + cut_w // 2, 0, width)
    rows, cols = jnp.arange(height)[:, None], jnp.arange(width)[None, :]
    box = (rows >= y0) & (rows < y1) & (cols >= x0) & (cols < x1)
    cutmixed = jnp.where(box[None, :, :, None], other, images)
    lam_box = 1.0 - ((y1 - y0) * (x1 - x0)) / (height * width)
    mixed_up = (lam_mixup * images.astype(jnp.float32) + (1.0 - lam_mixup) * other.astype(jnp.float32)).astype(
        images.dtype
    )
    lam = jnp.where(use_cutmix, lam_box, lam_mixup).astype(jnp.float32)
    return jnp.where(use_cutmix, cutmixed, mixed_up), lam
