"""Image classification batches: the embedded shapes set (in memory) and image folders (decoded by worker processes
or threads, several batches ahead of the one in use).

Batches: images uint8 (..., batch, size, size, 3), labels int32 (..., batch), mask float32 (..., batch): 1 where a
sample is scored (0 for padding in the last evaluation batch and for skipped unreadable images). Training walks the
training split in epochs, each a permutation drawn from (seed, epoch), so every batch is a pure function of
(seed, step): a resumed run sees the same images, with the same augmentations, as an uninterrupted one."""

import multiprocessing
import os
import sys
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from jax_mamba.data.batches import Batch
from jax_mamba.data.corpus import DataError
from jax_mamba.data.image_decode import AUGMENT_STREAM, CropSettings, decode_chunk
from jax_mamba.data.image_folder import ImageFiles

CHUNK_MAX = 8  # images per task handed to a decoding worker


@lru_cache(maxsize=4)
def _epoch_order(seed: int, count: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(count)


def training_indices(seed: int, count: int, start: int, size: int) -> np.ndarray:
    """Dataset indices at global sample positions [start, start + size): epoch after epoch, each a permutation."""
    positions = np.arange(start, start + size)
    epochs, offsets = np.divmod(positions, count)
    return np.array([_epoch_order(seed, count, int(e))[o] for e, o in zip(epochs, offsets, strict=True)])


def _eval_positions(count: int, batch_size: int, batches: int) -> list[np.ndarray]:
    """The first batches * batch_size validation samples (all, if fewer), in batches; the last may be short."""
    used = min(count, batches * batch_size)
    return [np.arange(i, min(i + batch_size, used)) for i in range(0, used, batch_size)]


def _padded(images: np.ndarray, labels: np.ndarray, mask: np.ndarray, batch_size: int) -> Batch:
    pad = batch_size - len(labels)
    if pad:
        images = np.concatenate([images, np.zeros((pad, *images.shape[1:]), images.dtype)])
        labels = np.concatenate([labels, np.zeros(pad, labels.dtype)])
        mask = np.concatenate([mask, np.zeros(pad, mask.dtype)])
    return {"images": images, "labels": labels.astype(np.int32), "mask": mask.astype(np.float32)}


class ArrayImageDataset:
    """Images already in memory (uint8 (N, size, size, 3)); training batches get a random horizontal flip.

    The mirrored images are made once, so that a batch is a single gather (the host work per step is then small
    enough for a GPU step of a few tens of milliseconds)."""

    metric = "top1"

    def __init__(
        self,
        train: tuple[np.ndarray, np.ndarray],
        val: tuple[np.ndarray, np.ndarray],
        classes: list[str],
        *,
        batch_size: int,
        seed: int,
        eval_batches: int,
        hflip: float,
        source: str,
    ):
        self.train_images, self.train_labels = train
        self.val_images, self.val_labels = val
        self.classes, self.num_classes = classes, len(classes)
        self.batch_size, self.seed, self.hflip, self.source = batch_size, seed, hflip, source
        self.image_size = self.train_images.shape[1]
        self._pool = np.concatenate([self.train_images, self.train_images[:, :, ::-1]]) if hflip > 0 else None
        self._eval = [
            _padded(self.val_images[i], self.val_labels[i], np.ones(len(i)), batch_size)
            for i in _eval_positions(len(self.val_labels), batch_size, eval_batches)
        ]

    def train_batch(self, step: int, accum: int) -> Batch:
        return self.train_batch_rows(step, accum, 0, self.batch_size)

    def train_batch_rows(self, step: int, accum: int, first: int, stop: int) -> Batch:
        """Rows [first, stop) of ``train_batch(step, accum)`` (one process's share of a multi-process run): one gather
        per micro-batch, straight into the batch array (the host's only copy of the images)."""
        rows = stop - first
        images = np.empty((accum, rows, *self.train_images.shape[1:]), np.uint8)
        labels = np.empty((accum, rows), np.int32)
        for m in range(accum):
            start = (step * accum + m) * self.batch_size
            index = training_indices(self.seed, len(self.train_labels), start + first, rows)
            if self._pool is None:
                np.take(self.train_images, index, axis=0, out=images[m])
            else:
                draws = np.random.default_rng([self.seed, AUGMENT_STREAM, start]).uniform(size=self.batch_size)
                flip = draws[first:stop] < self.hflip
                np.take(self._pool, index + flip * len(self.train_labels), axis=0, out=images[m])
            labels[m] = self.train_labels[index]
        return {"images": images, "labels": labels, "mask": np.ones((accum, rows), np.float32)}

    def eval_batches(self) -> list[Batch]:
        return self._eval

    def describe(self) -> dict:
        return {
            "kind": "images",
            "source": self.source,
            "classes": self.num_classes,
            "train_images": len(self.train_labels),
            "val_images": len(self.val_labels),
            "image_size": self.image_size,
        }


class FolderImageDataset:
    """Image files decoded and transformed by ``num_workers`` worker processes (``worker_type="process"``, the
    default: decoding scales with cores, free of the GIL) or threads (``"thread"``: no process start-up, for small
    runs), in chunks of a few images, ``prefetch`` training batches ahead. Unreadable files stop the run with a
    DataError naming them (``bad_images="stop"``) or are replaced by a blank, unscored sample and reported once
    (``"skip"``)."""

    metric = "top1"

    def __init__(
        self,
        files: ImageFiles,
        *,
        batch_size: int,
        seed: int,
        eval_batches: int,
        image_size: int,
        crop_pct: float,
        min_scale: float,
        hflip: float,
        num_workers: int,
        worker_type: str,
        prefetch: int,
        bad_images: str,
    ):
        self.files, self.classes, self.num_classes = files, files.classes, len(files.classes)
        self.batch_size, self.eval_batches_count, self.image_size = batch_size, eval_batches, image_size
        self.settings = CropSettings(image_size, crop_pct, min_scale, hflip, seed)
        self.prefetch, self.bad_images, self.worker_type = prefetch, bad_images, worker_type
        self.num_workers = num_workers or os.cpu_count() or 1
        # Chunks small enough that a batch spreads over every worker, large enough to amortize the hand-over.
        self.chunk = max(1, min(CHUNK_MAX, batch_size // self.num_workers))
        if worker_type == "process":
            context = multiprocessing.get_context("spawn")  # never fork a process that runs JAX's threads
            self._pool: Executor = ProcessPoolExecutor(self.num_workers, mp_context=context)
        else:
            self._pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="image-decode")
        self._pending: dict[tuple[int, int], tuple[list[tuple[Future, list[str]]], np.ndarray]] = {}
        self.skipped: set[str] = set()

    def _submit(self, samples: list[tuple[str, int | None]]) -> list[tuple[Future, list[str]]]:
        """Chunks of (path, position) decoded by the workers: [(future, the chunk's paths)]."""
        chunks = [samples[i : i + self.chunk] for i in range(0, len(samples), self.chunk)]
        return [(self._pool.submit(decode_chunk, c, self.settings), [p for p, _ in c]) for c in chunks]

    def _collect(self, chunks: list[tuple[Future, list[str]]]) -> tuple[np.ndarray, np.ndarray]:
        """(images uint8 (n, size, size, 3), mask float32 (n,)): waits for the chunks, applies the bad-image policy."""
        images, mask = [], []
        for future, paths in chunks:
            crops, errors = future.result()
            images.append(crops)
            for path, error in zip(paths, errors, strict=True):
                mask.append(0.0 if error else 1.0)
                if error is None:
                    continue
                if self.bad_images == "stop":
                    raise DataError(f"unreadable image {path}: {error} (set data.bad_images=skip to skip such files)")
                if path not in self.skipped:
                    self.skipped.add(path)
                    print(f"warning: skipping unreadable image {path}: {error}", file=sys.stderr)
        return np.concatenate(images), np.asarray(mask, np.float32)

    def _submit_training(self, step: int, accum: int) -> tuple[list[tuple[Future, list[str]]], np.ndarray]:
        """The decoding chunks of a training batch and its labels int32 (accum * batch_size,)."""
        size = accum * self.batch_size
        start = step * size
        index = training_indices(self.settings.seed, len(self.files.train), start, size).tolist()
        labels = np.array([self.files.train[i][1] for i in index], np.int32)
        return self._submit([(self.files.train[i][0], start + k) for k, i in enumerate(index)]), labels

    def train_batch(self, step: int, accum: int) -> Batch:
        for ahead in range(step, step + self.prefetch + 1):
            if (ahead, accum) not in self._pending:
                self._pending[(ahead, accum)] = self._submit_training(ahead, accum)
        for key in [k for k in self._pending if k[0] < step]:  # a jump back or forward: drop what is not needed
            for future, _ in self._pending.pop(key)[0]:
                future.cancel()
        chunks, labels = self._pending.pop((step, accum))
        images, mask = self._collect(chunks)
        shape = (accum, self.batch_size)
        return {
            "images": images.reshape(*shape, *images.shape[1:]),
            "labels": labels.reshape(shape),
            "mask": mask.reshape(shape),
        }

    def eval_batches(self) -> Iterator[Batch]:
        """The first eval_batches * batch_size validation images in file order, the next batch decoding while the
        current one is in use."""
        positions = _eval_positions(len(self.files.val), self.batch_size, self.eval_batches_count)
        submit = lambda idx: self._submit([(self.files.val[i][0], None) for i in idx])  # noqa: E731
        upcoming = submit(positions[0]) if positions else []
        for n, idx in enumerate(positions):
            current, upcoming = upcoming, (submit(positions[n + 1]) if n + 1 < len(positions) else [])
            images, mask = self._collect(current)
            labels = np.array([self.files.val[i][1] for i in idx.tolist()], np.int32)
            yield _padded(images, labels, mask, self.batch_size)

    def describe(self) -> dict:
        return {
            "kind": "image_folder",
            "source": self.files.source,
            "classes": self.num_classes,
            "train_images": len(self.files.train),
            "val_images": len(self.files.val),
            "image_size": self.image_size,
            "workers": self.num_workers,
            "worker_type": self.worker_type,
        }

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
