"""MambaVision's on-device batch augmentations (``jax_mamba.tasks.image_augment``): random erasing replaces one box
per chosen image with noise, mixup blends and cutmix pastes the reversed batch with the share ``lam`` the mixed
targets use (soft targets summing to one), all reproducible from their key. Resuming a run that uses them:
test_train_vision.py."""

import jax
import jax.numpy as jnp
import numpy as np

from jax_mamba.tasks.image_augment import mix_batch, random_erase
from jax_mamba.tasks.losses import cross_entropy


def images(rng, batch=6, size=20) -> jax.Array:
    return jnp.asarray(rng.normal(size=(batch, size, size, 3)), jnp.float32)


def test_random_erasing_replaces_one_box_per_chosen_image(rng):
    x = images(rng)
    key = jax.random.key(int(rng.integers(2**31)))
    assert np.array_equal(random_erase(key, x, 0.0), x)
    erased = np.asarray(random_erase(key, x, 1.0))
    assert np.array_equal(erased, np.asarray(random_erase(key, x, 1.0)))  # a function of its key
    assert not np.array_equal(erased, np.asarray(random_erase(jax.random.fold_in(key, 1), x, 1.0)))
    for before, after in zip(np.asarray(x), erased, strict=True):
        changed = np.any(after != before, axis=-1)  # (H, W)
        rows, cols = np.nonzero(changed.any(axis=1))[0], np.nonzero(changed.any(axis=0))[0]
        assert rows.size and cols.size, "every image erased at probability 1 (a box always fits at 20 px)"
        box = changed[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
        assert box.all() and changed.sum() == box.size  # one solid rectangle
        assert 0.01 <= box.size / changed.size <= 0.4  # 2-33% of the area, up to rounding
        assert np.all(np.isfinite(after)) and abs(after[changed].std() - 1.0) < 0.5  # standard normal noise


def test_mixup_blends_and_cutmix_pastes_the_reversed_batch_by_lam(rng):
    x = images(rng)
    key = jax.random.key(int(rng.integers(2**31)))
    mixed, lam = mix_batch(key, x, 0.8, 0.0, 0.5)
    assert 0.0 < float(lam) < 1.0
    np.testing.assert_allclose(mixed, float(lam) * x + (1 - float(lam)) * x[::-1], rtol=1e-6, atol=1e-6)
    for k in range(8):  # cutmix: the box of the other image covers 1 - lam of the area, the rest is kept
        cut, lam = mix_batch(jax.random.fold_in(key, k), x, 0.0, 1.0, 0.5)
        from_other = np.all(np.asarray(cut) == np.asarray(x[::-1]), axis=(0, 3)) & np.any(x != x[::-1], axis=(0, 3))
        kept = np.all(np.asarray(cut) == np.asarray(x), axis=(0, 3))
        assert np.all(from_other | kept)
        np.testing.assert_allclose(float(lam), 1.0 - from_other.mean(), rtol=1e-6)
    keys = [jax.random.fold_in(key, k) for k in range(16)]
    both, cut_only = ([np.asarray(mix_batch(k, x, alpha, 1.0, 0.5)[0]) for k in keys] for alpha in (0.8, 0.0))
    chosen = [np.array_equal(a, b) for a, b in zip(both, cut_only, strict=True)]
    assert 0 < sum(chosen) < 16  # with both, cutmix about half the time (all or none: 2 in 65536)


def test_mixed_targets_sum_to_one_and_give_the_soft_target_loss(rng):
    logits = jnp.asarray(rng.normal(size=(6, 5)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 5, size=6))
    lam, smoothing = 0.3, 0.1
    loss = lam * cross_entropy(logits, labels, smoothing) + (1 - lam) * cross_entropy(logits, labels[::-1], smoothing)
    smooth = lambda y: (1 - smoothing) * np.eye(5)[np.asarray(y)] + smoothing / 5  # noqa: E731
    target = lam * smooth(labels) + (1 - lam) * smooth(labels[::-1])
    np.testing.assert_allclose(target.sum(axis=1), 1.0, rtol=1e-12)
    expected = -np.sum(target * np.asarray(jax.nn.log_softmax(logits)), axis=1)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
