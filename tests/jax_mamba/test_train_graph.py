"""Graph-Mamba through the shared training loop: a tiny model learns the embedded CLUSTER-style communities and a
generated graph-classification set well above chance, compiling once per planned batch shape; dropout, orderings
and batch statistics resume exactly; data/model mismatches are named errors."""

import pytest

from jax_mamba.configs import load_config
from jax_mamba.data import DataError
from jax_mamba.tasks import task_for
from jax_mamba.train.__main__ import main
from jax_mamba.train.loop import train
from jax_mamba.train.step_clock import NEW_SHAPE_RUNS, TIMING_WARMUP_STEPS
from tests.jax_mamba.training_runs import QUIET, evals, losses, records, whole_and_resumed_runs

GRAPH_CLASSES = [
    "--data.kind=graph_classes",
    "--model.task_level=graph",
    "--model.num_outputs=5",
    "--model.node_feature_kind=categorical",
    "--model.node_vocab=[3]",
    "--model.edge_feature_kind=categorical",
    "--model.edge_vocab=[2]",
    "--model.head_layers=1",
]
# The learning tests read the final evaluation only: no evaluation or checkpoint on the way.
END_ONLY = ["--eval_every=100000", "--save_checkpoints=false"]


@pytest.mark.slow
def test_tiny_graph_mamba_learns_the_communities(tmp_path):
    """110 steps: about 0.29-0.30 accuracy and balanced accuracy (150 steps gain about 0.01)."""
    cfg = load_config("graph-mamba-tiny", [*QUIET, *END_ONLY, "--max_steps=110"])
    result = train(cfg, run_dir=tmp_path, echo=lambda *_: None)
    assert result.step == 110 and result.unit == "graphs" and result.items_per_s > 0
    assert result.traces <= 3  # one compilation per planned shape (two here), not per batch
    assert result.eval["eval_accuracy"] > 0.25 and result.eval["eval_balanced_accuracy"] > 0.25  # chance: 1/6
    assert any("accuracy" in r and "graphs_per_s" in r for r in records(tmp_path))
    # The throughput leaves out the first NEW_SHAPE_RUNS steps of each batch shape first seen after the warm-up.
    dataset = task_for(cfg).make_dataset()
    shapes = [dataset.train_batch(s, 1)["node_mask"].shape for s in range(110)]
    late = set(shapes[TIMING_WARMUP_STEPS:]) - set(shapes[:TIMING_WARMUP_STEPS])
    (end,) = [r for r in records(tmp_path) if r.get("event") == "end"]
    assert late and end["new_shape_steps_excluded"] == NEW_SHAPE_RUNS * len(late)


@pytest.mark.slow
def test_tiny_graph_mamba_learns_graph_classes(tmp_path):
    """80 steps: about 0.5 accuracy whatever the seed (it levels off there; 120 steps gain nothing)."""
    overrides = [*QUIET, *END_ONLY, *GRAPH_CLASSES, "--batch_size=32", "--max_steps=80", "--data.val_fraction=0.2"]
    result = train(load_config("graph-mamba-tiny", overrides), run_dir=tmp_path, echo=lambda *_: None)
    assert result.eval["eval_accuracy"] > 0.4  # five balanced classes: chance 0.2


def test_resume_continues_orderings_dropout_and_batch_statistics(tmp_path):
    overrides = ["--batch_size=4", "--data.num_graphs=40", "--model.dropout=0.3", "--model.n_layers=1"]
    whole, parts, _ = whole_and_resumed_runs("graph-mamba-tiny", overrides, tmp_path, steps=6, stop_after=3, every=3)
    assert losses(parts) == losses(whole) and sorted(losses(whole)) == list(range(1, 7))
    assert evals(parts) == evals(whole)


def test_model_that_does_not_fit_the_data_is_a_named_error(capsys):
    with pytest.raises(DataError, match=r"--model\.task_level=graph --model\.node_feature_kind=categorical"):
        task_for(load_config("graph-mamba-tiny", ["--data.kind=graph_classes"])).make_dataset()
    assert main(["--config", "graph-mamba-tiny", "--data.kind=graph_classes", *QUIET]) == 2
    assert "--model.task_level=graph" in capsys.readouterr().err
    assert main(["--config", "graph-mamba-tiny", "--data", "/nonexistent/pyg", *QUIET]) == 2
    assert "/nonexistent/pyg" in capsys.readouterr().err
