"""RandAugment on the device (``jax_mamba.tasks.rand_augment``) against PIL, whose operations timm's RandAugment
calls: each of the fifteen operations on random images, the policy string's parsing and refusals, and the whole
policy's draws (a function of the key, whole values in [0, 255], some images left alone at probability 0.5 per
layer). Resuming a run that uses it: test_train_vision.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image, ImageEnhance, ImageOps

from jax_mamba.configs.loader import ConfigError, load_config
from jax_mamba.configs.schema import RandAugmentPolicy, rand_augment_policy
from jax_mamba.tasks.rand_augment import OPS, apply_operations, rand_augment

FILL = np.array([124.0, 116.0, 104.0], np.float32)  # timm's img_mean for ImageNet's mean


def pictures(rng, batch=3, height=24, width=20) -> np.ndarray:
    """Random images with some structure (a smooth gradient plus noise), whole values in [0, 255]."""
    ramp = np.linspace(0, 200, width)[None, None, :, None] + np.linspace(0, 50, height)[None, :, None, None]
    noise = rng.integers(0, 56, size=(batch, height, width, 3))
    return np.clip(np.round(ramp) + noise, 0, 255).astype(np.float32)


def ours(images, name, level, sign=1.0, increasing=True) -> np.ndarray:
    batch = images.shape[0]
    op = jnp.full((batch,), OPS.index(name))
    args = (jnp.full((batch,), level, jnp.float32), jnp.full((batch,), sign, jnp.float32))
    return np.asarray(apply_operations(jnp.asarray(images), op, *args, increasing, jnp.asarray(FILL)))


def pil(images, operation) -> np.ndarray:
    return np.stack([np.asarray(operation(Image.fromarray(x.astype(np.uint8)))) for x in images]).astype(np.float32)


LEVEL = 0.87
TABLES = {  # PIL's result of each lookup-table operation at LEVEL (timm's magnitude mappings, increasing set)
    "AutoContrast": ImageOps.autocontrast,
    "Equalize": ImageOps.equalize,
    "Invert": ImageOps.invert,
    "Posterize": lambda im: ImageOps.posterize(im, 4 - int(LEVEL * 4)),
    "Solarize": lambda im: ImageOps.solarize(im, 256 - int(LEVEL * 256)),
    "SolarizeAdd": lambda im: im.point([min(255, i + int(LEVEL * 110)) if i < 128 else i for i in range(256)] * 3),
}


@pytest.mark.parametrize("name", list(TABLES))
def test_lookup_operations_equal_pil(rng, name):
    images = pictures(rng)
    images[0, :, :, 1] = 77.0  # a flat channel: autocontrast and equalize leave it
    got, expected = ours(images, name, LEVEL), pil(images, TABLES[name])
    if name == "AutoContrast":  # PIL truncates a float64 stretch, we a float32 one: whole values may fall 1 apart
        assert np.max(np.abs(got - expected)) <= 1.0 and np.array_equal(got[0, ..., 1], expected[0, ..., 1])
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["Color", "Contrast", "Brightness", "Sharpness"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_enhancements_equal_pil_to_rounding(rng, name, sign):
    images = pictures(rng)
    factor = max(0.1, 1.0 + sign * LEVEL * 0.9)
    expected = pil(images, lambda im: getattr(ImageEnhance, name)(im).enhance(factor))
    got = ours(images, name, LEVEL, sign)
    assert np.max(np.abs(got - expected)) <= 1.0, name
    assert np.mean(got != expected) < 0.05, name
    if name in ("Color", "Contrast", "Brightness"):  # the not-increasing set's factor: 0.1 + 1.8 x level
        expected = pil(images, lambda im: getattr(ImageEnhance, name)(im).enhance(0.1 + 1.8 * LEVEL))
        assert np.max(np.abs(ours(images, name, LEVEL, sign, increasing=False) - expected)) <= 1.0


def test_rotation_equals_pil_inside_the_picture(rng):
    """30 degrees counter-clockwise (magnitude 10) against PIL's bilinear rotation away from the borders, where the
    two weigh the fill differently; magnitude 0 is exactly the identity."""
    images = pictures(rng, height=17, width=17)
    np.testing.assert_array_equal(ours(images, "Rotate", 0.0), images)
    once = ours(images, "Rotate", 1.0)
    expected = pil(images, lambda im: im.rotate(30, Image.BILINEAR, fillcolor=tuple(int(v) for v in FILL)))
    inner = (slice(None), slice(4, -4), slice(4, -4))
    assert np.max(np.abs(once[inner] - expected[inner])) <= 1.0
    assert np.mean(np.abs(once - images)) > 10 * np.mean(np.abs(once[inner] - expected[inner]))


@pytest.mark.parametrize("name,axis", [("TranslateX", 2), ("TranslateY", 1)])
def test_translations_move_the_picture_and_fill_the_rest(rng, name, axis):
    images = pictures(rng, height=20, width=20)
    level = 3 / 9  # 0.45 x 20 x 3/9 = 3 pixels
    moved = ours(images, name, level, 1.0)
    kept = np.take(moved, np.arange(0, 17), axis=axis)
    np.testing.assert_array_equal(kept, np.take(images, np.arange(3, 20), axis=axis))
    filled = np.take(moved, np.arange(17, 20), axis=axis)
    np.testing.assert_array_equal(filled, np.broadcast_to(FILL, filled.shape))
    back = ours(images, name, level, -1.0)
    np.testing.assert_array_equal(np.take(back, np.arange(3, 20), axis=axis), np.take(images, np.arange(17), axis=axis))


@pytest.mark.parametrize("name", ["ShearX", "ShearY"])
def test_shears_equal_pil_inside_the_picture(rng, name):
    images = pictures(rng)
    s = LEVEL * 0.3
    matrix = (1, s, 0, 0, 1, 0) if name == "ShearX" else (1, 0, 0, s, 1, 0)
    fill = tuple(int(v) for v in FILL)
    expected = pil(images, lambda im: im.transform(im.size, Image.AFFINE, matrix, Image.BILINEAR, fillcolor=fill))
    got = ours(images, name, LEVEL)
    # PIL samples at pixel centers offset by half a pixel: the same up to the half pixel's shift
    assert np.mean(np.abs(got - expected)) < 12.0
    assert np.mean(np.abs(got - images)) > np.mean(np.abs(got - expected))  # it did shear


def test_the_policy_draws_from_its_key_and_keeps_whole_values(rng):
    images = jnp.asarray(pictures(rng, batch=16))
    policy = rand_augment_policy("rand-m9-mstd0.5-inc1")
    key = jax.random.key(int(rng.integers(2**31)))
    out = np.asarray(rand_augment(key, images, policy, jnp.asarray(FILL)))
    np.testing.assert_array_equal(out, np.asarray(rand_augment(key, images, policy, jnp.asarray(FILL))))
    other = np.asarray(rand_augment(jax.random.fold_in(key, 1), images, policy, jnp.asarray(FILL)))
    assert not np.array_equal(out, other)
    assert np.all(np.isfinite(out)) and out.min() >= 0 and out.max() <= 255 and np.array_equal(out, np.round(out))
    changed = np.any(out != np.asarray(images), axis=(1, 2, 3))
    assert 0 < changed.sum() < 16  # each layer leaves an image alone with probability 0.5: (1/2)^2 x 16 expected


def test_policy_strings():
    assert rand_augment_policy("") is None
    assert rand_augment_policy("rand-m9-mstd0.5-inc1") == RandAugmentPolicy(9.0, 2, 0.5, True)
    assert rand_augment_policy("rand-n3-m7") == RandAugmentPolicy(7.0, 3, 0.0, False)
    for bad in ("rand-m11", "randaug-m9", "rand-m9-x2", "rand-n0", "rand-inc2", "rand-n1.5"):
        with pytest.raises(ValueError, match=r"data\.rand_augment"):
            rand_augment_policy(bad)
    with pytest.raises(ConfigError, match=r"data\.rand_augment"):
        load_config("mambavision-tiny", ["--data.rand_augment=rand-m9-q1"])
    assert load_config("mambavision-T").data.rand_augment == "rand-m9-mstd0.5-inc1"
