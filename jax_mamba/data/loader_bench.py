"""Images/s of the image-folder loader alone (decode, augment, batch; no model): ``python -m
jax_mamba.data.loader_bench --data DIR``.

Times ``--steps`` training batches after a warm-up batch, the way the training loop asks for them (one after the
other, the loader decoding ``prefetch`` batches ahead on its workers), and, on a fresh loader after a warm-up pass,
the evaluation transform over the validation batches. Prints one JSON line."""

import argparse
import json
import os
import sys
import time

from jax_mamba.configs.schema import WORKER_TYPES, DataConfig, TrainConfig
from jax_mamba.data import make_dataset


def measure(
    path: str, image_size: int, batch_size: int, steps: int, workers: int, eval_batches: int, worker_type: str
) -> dict:
    data = DataConfig(
        kind="image_folder", path=path, image_size=image_size, num_workers=workers, worker_type=worker_type
    )
    train = TrainConfig(batch_size=batch_size, eval_batches=eval_batches)
    dataset = make_dataset(data, train)
    try:
        dataset.train_batch(0, 1)  # warm-up: worker start, first epoch's order
        began = time.perf_counter()
        for step in range(1, steps + 1):
            dataset.train_batch(step, 1)
        train_s = time.perf_counter() - began
    finally:
        dataset.close()
    dataset = make_dataset(data, train)  # evaluation on idle workers, not behind prefetched training batches
    try:
        sum(1 for _ in dataset.eval_batches())  # warm-up: worker start
        began = time.perf_counter()
        evaluated = sum(int(b["mask"].sum()) for b in dataset.eval_batches())
        eval_s = time.perf_counter() - began
    finally:
        dataset.close()
    return {
        "data": dataset.describe(),
        "cpu_cores": os.cpu_count(),
        "workers": dataset.num_workers,
        "worker_type": worker_type,
        "batch_size": batch_size,
        "train_images_per_s": steps * batch_size / train_s,
        "eval_images_per_s": evaluated / eval_s if evaluated else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jax_mamba.data.loader_bench", description=__doc__)
    parser.add_argument("--data", required=True, help="an image folder (class subfolders, or train/ and val/)")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=0, help="decoding workers (0: one per CPU core)")
    parser.add_argument("--worker_type", choices=WORKER_TYPES, default="process")
    parser.add_argument("--eval_batches", type=int, default=4)
    args = parser.parse_args(argv)
    result = measure(
        args.data, args.image_size, args.batch_size, args.steps, args.workers, args.eval_batches, args.worker_type
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
