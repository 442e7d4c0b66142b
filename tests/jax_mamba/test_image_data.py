"""Image data: the embedded shapes set, image folders (both layouts, every error a user can meet), the transforms,
unreadable files (stop or skip), determinism by (seed, step), epochs, evaluation padding, the loader benchmark."""

import json

import numpy as np
import pytest
from PIL import Image

from jax_mamba.configs.schema import DataConfig, TrainConfig
from jax_mamba.data import DataError, make_dataset
from jax_mamba.data.export_shapes import export
from jax_mamba.data.image_classification import training_indices
from jax_mamba.data.image_folder import scan_image_folder
from jax_mamba.data.image_transforms import RATIO, eval_transform, random_resized_box, train_transform
from jax_mamba.data.loader_bench import main as loader_bench
from jax_mamba.data.shapes import CLASSES, render_shapes


def folder_data(path, **changes) -> DataConfig:
    return DataConfig(**{"kind": "image_folder", "path": str(path), "image_size": 24, "num_workers": 2, **changes})


def write_images(folder, count: int, rng, size=(30, 20), fmt="png") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        pixels = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.{fmt}")


def test_shapes_are_deterministic_and_balanced():
    images, labels = render_shapes(30, 32)
    again, _ = render_shapes(30, 32)
    np.testing.assert_array_equal(images, again)
    assert images.shape == (30, 32, 32, 3) and images.dtype == np.uint8
    assert np.bincount(labels, minlength=len(CLASSES)).tolist() == [3] * len(CLASSES)
    assert images.std() > 20  # not blank


def test_shapes_dataset_batches_by_step(rng):
    data = DataConfig(kind="shapes", image_size=16, num_images=50, val_fraction=0.2)
    train = TrainConfig(batch_size=8, eval_batches=3, seed=int(rng.integers(1000)))
    dataset = make_dataset(data, train)
    batch = dataset.train_batch(5, 2)
    assert batch["images"].shape == (2, 8, 16, 16, 3) and batch["labels"].shape == (2, 8)
    again = make_dataset(data, train).train_batch(5, 2)
    assert all(np.array_equal(batch[k], again[k]) for k in batch)  # a pure function of (seed, step)
    assert not np.array_equal(dataset.train_batch(6, 2)["images"], batch["images"])
    evals = list(dataset.eval_batches())  # 10 validation images in batches of 8: the second padded, masked out
    assert [int(b["mask"].sum()) for b in evals] == [8, 2]
    assert all(b["images"].shape == (8, 16, 16, 3) for b in evals)


def test_training_walks_epochs_without_repeats():
    order = training_indices(seed=3, count=10, start=0, size=30)
    for epoch in range(3):
        assert sorted(order[10 * epoch : 10 * epoch + 10].tolist()) == list(range(10))
    assert not np.array_equal(order[:10], order[10:20])
    np.testing.assert_array_equal(training_indices(3, 10, 7, 9), order[7:16])


def test_image_folder_with_train_and_val_splits(tmp_path, rng):
    for split, count in (("train", 5), ("val", 2)):
        for name in ("cat", "dog"):
            write_images(tmp_path / split / name, count, rng)
    (tmp_path / "train" / "dog" / "notes.txt").write_text("not an image")
    (tmp_path / "train" / ".hidden").mkdir()
    files = scan_image_folder(str(tmp_path), 0.5)
    assert files.classes == ["cat", "dog"] and len(files.train) == 10 and len(files.val) == 4
    assert {label for _, label in files.val} == {0, 1}


def test_image_folder_without_splits_is_split_by_hash(tmp_path, rng):
    for name in ("a", "b", "c"):
        write_images(tmp_path / name, 12, rng)
    files = scan_image_folder(str(tmp_path), 0.3)
    assert files.classes == ["a", "b", "c"] and len(files.train) + len(files.val) == 36
    assert 0 < len(files.val) < 36
    assert scan_image_folder(str(tmp_path), 0.3).val == files.val  # stable


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda root, rng: None, "does not exist"),
        (lambda root, rng: root.write_text("x"), "is a file"),
        (lambda root, rng: root.mkdir(), "has no class subfolders"),
        (
            lambda root, rng: ((root / "empty").mkdir(parents=True), write_images(root / "full", 3, rng)),
            "hold no image",
        ),
        (lambda root, rng: write_images(root / "only", 1, rng), "too few to split"),
    ],
)
def test_image_folder_errors_name_the_problem(tmp_path, rng, make, message):
    root = tmp_path / "data"
    make(root, rng)
    with pytest.raises(DataError, match=message):
        make_dataset(folder_data(root), TrainConfig(batch_size=2))


def test_validation_classes_must_be_known(tmp_path, rng):
    write_images(tmp_path / "train" / "a", 2, rng)
    write_images(tmp_path / "val" / "b", 2, rng)
    with pytest.raises(DataError, match=r"validation classes \['b'\]"):
        scan_image_folder(str(tmp_path), 0.1)


@pytest.mark.parametrize("width,height", [(30, 20), (7, 40), (100, 9)])
def test_random_resized_box_is_inside_with_a_valid_ratio(rng, width, height):
    for _ in range(50):
        left, top, right, bottom = random_resized_box(width, height, 0.08, rng)
        assert 0 <= left < right <= width and 0 <= top < bottom <= height
        area = (right - left) * (bottom - top)
        ratio = (right - left) / (bottom - top)
        inside = RATIO[0] * 0.8 <= ratio <= RATIO[1] * 1.25 and area >= 0.08 * width * height * 0.5
        fallback = (right - left, bottom - top) in ((width, height), (width, round(width / RATIO[0])))
        assert inside or fallback or right - left == round(height * RATIO[1])


def test_transforms_give_fixed_size_uint8(rng):
    image = Image.fromarray(rng.integers(0, 256, size=(33, 51, 3), dtype=np.uint8)).convert("L")  # grey input
    out = train_transform(image, 24, 0.08, 1.0, rng)
    assert out.shape == (24, 24, 3) and out.dtype == np.uint8
    ramp = Image.fromarray(np.tile(np.arange(60, dtype=np.uint8)[None, :, None] * 4, (40, 1, 3)))
    centre = eval_transform(ramp, 20, 0.5)  # shorter side 40 -> resize to 40, centre 20x20 crop of a ramp
    assert centre.shape == (20, 20, 3)
    assert abs(int(centre[10, 10, 0]) - 4 * 30) <= 8  # the middle of the ramp stays in the middle


def test_folder_batches_are_deterministic_and_augmented(tmp_path, rng):
    export(tmp_path, 60, 32, val_fraction=0.2, fmt="png")
    train = TrainConfig(batch_size=6, eval_batches=2, seed=4)
    first = make_dataset(folder_data(tmp_path), train)
    second = make_dataset(folder_data(tmp_path, num_workers=1, worker_type="thread"), train)
    try:
        a, b = first.train_batch(3, 1), second.train_batch(3, 1)  # any worker count or type, the same batch
        assert a["images"].shape == (1, 6, 24, 24, 3) and all(np.array_equal(a[k], b[k]) for k in a)
        assert not np.array_equal(first.train_batch(4, 1)["images"], a["images"])
        evals = list(first.eval_batches())
        assert [int(e["mask"].sum()) for e in evals] == [6, 6] and len(first.files.val) == 12
        assert first.describe()["classes"] == len(CLASSES) and first.describe()["worker_type"] == "process"
        assert all(np.array_equal(x[k], y[k]) for x, y in zip(evals, second.eval_batches(), strict=True) for k in x)
    finally:
        first.close()
        second.close()


def test_unreadable_images_stop_or_are_skipped(tmp_path, rng, capsys):
    for name in ("a", "b"):
        write_images(tmp_path / "train" / name, 3, rng)
        write_images(tmp_path / "val" / name, 1, rng)
    (tmp_path / "train" / "a" / "broken.jpg").write_bytes(b"not a jpeg")
    train = TrainConfig(batch_size=7, eval_batches=1)  # one step covers all 7 training files
    stopping = make_dataset(folder_data(tmp_path), train)
    try:
        with pytest.raises(DataError, match=r"unreadable image .*broken\.jpg.*bad_images=skip"):
            stopping.train_batch(0, 1)
    finally:
        stopping.close()
    skipping = make_dataset(folder_data(tmp_path, bad_images="skip", worker_type="thread"), train)
    try:
        batch = skipping.train_batch(0, 1)
        assert batch["mask"].sum() == 6 and len(skipping.skipped) == 1
        assert "skipping unreadable image" in capsys.readouterr().err
    finally:
        skipping.close()


def test_loader_benchmark_reports_images_per_second(tmp_path, capsys):
    export(tmp_path, 40, 48, fmt="jpg")
    argv = ["--data", str(tmp_path), "--image_size", "32", "--batch_size", "8", "--steps", "2", "--workers", "2"]
    assert loader_bench(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["train_images_per_s"] > 0 and result["eval_images_per_s"] > 0 and result["workers"] == 2
