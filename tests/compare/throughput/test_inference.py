"""The JAX inference throughput bench on the CPU: a graph config's size buckets give batches of several shapes, and a
shape's first runs after the warm-up (compilation) are left out of the rate, as the training loop leaves them out."""

import jax
import numpy as np

from compare.throughput.inference import measure
from jax_mamba.configs.loader import load_config
from jax_mamba.tasks import task_for
from jax_mamba.train.step_clock import NEW_SHAPE_RUNS, TIMING_WARMUP_STEPS


def test_a_new_batch_shapes_first_runs_are_not_timed():
    steps, batch_size = 12, 4
    overrides = ["--data.num_graphs=48"]
    result = measure("graph-mamba-tiny", steps, batch_size, 32, overrides)
    cfg = load_config("graph-mamba-tiny", [f"--batch_size={batch_size}", "--eval_batches=1", *overrides])
    dataset = task_for(cfg).make_dataset()
    shapes = [
        tuple(np.shape(x) for x in jax.tree.leaves(jax.tree.map(lambda a: a[0], dataset.train_batch(step, 1))))
        for step in range(steps)
    ]
    runs = {shape: NEW_SHAPE_RUNS for shape in shapes[:TIMING_WARMUP_STEPS]}
    expected = 0
    for shape in shapes[TIMING_WARMUP_STEPS:]:
        expected += runs.get(shape, 0) >= NEW_SHAPE_RUNS
        runs[shape] = runs.get(shape, 0) + 1
    assert len(set(shapes[TIMING_WARMUP_STEPS:]) - set(shapes[:TIMING_WARMUP_STEPS])) > 0, "no new shape: no test"
    assert result["timed_steps"] == expected < steps - TIMING_WARMUP_STEPS
    assert result["unit"] == "graphs" and np.isfinite(result["items_per_s"]) and result["items_per_s"] > 0
