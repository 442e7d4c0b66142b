"""A new run from the weights of another (``--init_from``): a run folder or one of its steps loads exactly, the
optimizer starts fresh, what does not fit is refused in one line unless ``--init_from_skip`` names it (then it keeps
its fresh initialization), and the run records where its weights came from. Sources written by mamba-ssm's and
NVlabs' own code: tests/torch_reference/test_init_from.py."""

import json

import jax
import numpy as np
import pytest

from jax_mamba.checkpoints.init_from import InitFromError, fit_weights, read_weights
from jax_mamba.checkpoints.store import CheckpointStore
from jax_mamba.configs import load_config
from jax_mamba.tasks import task_for
from jax_mamba.train.__main__ import main
from jax_mamba.train.loop import train
from jax_mamba.train.optim import make_optimizer
from jax_mamba.train.step import initial_variables, variable_shapes
from tests.jax_mamba.training_runs import QUIET, records

ONE_LAYER = ["--n_layer=1", "--batch_size=2", "--seq_len=16", "--eval_batches=1"]


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    """mamba2-tiny (one layer) trained 2 steps, saved at both."""
    run = tmp_path_factory.mktemp("source") / "run"
    steps = ["--max_steps=2", "--save_every=1", "--eval_every=2"]
    train(load_config("mamba2-tiny", [*QUIET, *ONE_LAYER, *steps]), run_dir=run, echo=lambda *_: None)
    return run


def saved_params(run, step: int) -> dict:
    cfg = load_config("mamba2-tiny", ONE_LAYER)
    like, _ = variable_shapes(cfg, task_for(cfg))
    return {k: np.asarray(v) for k, v in CheckpointStore(run / "checkpoints", 3).restore_params(step, like).items()}


def starting_from(overrides: list[str]):
    """(cfg, fitted StartingWeights, the run's initial params, opt_state) for mamba2-tiny with ``overrides``."""
    cfg = load_config("mamba2-tiny", [*ONE_LAYER, *overrides])
    task = task_for(cfg)
    params_like, state_like = variable_shapes(cfg, task)
    weights = read_weights(cfg.train.init_from, cfg.family, cfg.model)
    fitted = fit_weights(weights, params_like, state_like, cfg.train.init_from_skip, task.head_patterns)

    def make_tx(params):
        return make_optimizer(cfg.optim, cfg.train.max_steps, task.weight_decay_mask(params))

    _, params, _, _, opt_state = initial_variables(cfg, task, None, make_tx, fitted)
    return cfg, fitted, {k: np.asarray(v) for k, v in params.items()}, opt_state


def test_a_run_folder_loads_its_newest_step_exactly_and_a_step_folder_that_step(source_run):
    _, fitted, params, opt_state = starting_from([f"--init_from={source_run}", "--seed=7"])
    newest = saved_params(source_run, 2)
    assert params.keys() == newest.keys() and all(np.array_equal(params[k], newest[k]) for k in newest)
    assert fitted.info == {"path": str(source_run), "kind": "run", "step": 2, "skipped": []}
    moments = [np.asarray(x) for x in jax.tree.leaves(opt_state) if np.ndim(x) >= 1]
    assert moments and all(not np.any(m) for m in moments)  # AdamW's moments start at zero: a fresh optimizer
    _, fitted, params, _ = starting_from([f"--init_from={source_run / 'checkpoints' / '1'}"])
    first = saved_params(source_run, 1)
    assert fitted.info["step"] == 1 and all(np.array_equal(params[k], first[k]) for k in first)
    assert any(not np.array_equal(first[k], newest[k]) for k in first)


def test_what_does_not_fit_is_refused_unless_skipped(source_run):
    with pytest.raises(InitFromError, match=r"9 missing \(backbone\.layers\.1\.mixer\.A_log, .*--init_from_skip"):
        starting_from([f"--init_from={source_run}", "--n_layer=2"])
    with pytest.raises(InitFromError, match=r"of another shape \(backbone\.embedding\.embedding \(256, 64\) there"):
        starting_from([f"--init_from={source_run}", "--vocab_size=300"])
    new_vocab = [f"--init_from={source_run}", "--vocab_size=300", "--seed=5"]
    cfg, fitted, params, _ = starting_from([*new_vocab, "--init_from_skip=head"])
    assert fitted.info["skipped"] == ["backbone.embedding.embedding"]
    newest = saved_params(source_run, 2)
    fresh = initial_variables(load_config("mamba2-tiny", [*ONE_LAYER, "--vocab_size=300", "--seed=5"]), task_for(cfg))
    assert np.array_equal(params["backbone.embedding.embedding"], np.asarray(fresh[1]["backbone.embedding.embedding"]))
    assert all(np.array_equal(params[k], newest[k]) for k in newest if k != "backbone.embedding.embedding")
    _, by_pattern, _, _ = starting_from([*new_vocab, "--init_from_skip=backbone.embedding.*"])
    assert by_pattern.info["skipped"] == fitted.info["skipped"]


def test_the_command_line_records_the_source_and_names_bad_input(source_run, tmp_path, capsys):
    base = ["--config", "mamba2-tiny", *ONE_LAYER, *QUIET, "--max_steps=1", "--eval_every=1"]
    run = tmp_path / "tuned"
    assert main([*base, f"--run_dir={run}", f"--init_from={source_run}"]) == 0
    assert f"weights from {source_run} (run)" in capsys.readouterr().out
    assert json.loads((run / "run.json").read_text())["init_from"]["step"] == 2
    assert [r["step"] for r in records(run) if "loss" in r and "event" not in r] == [1]  # the step counter at 0
    assert main([*base, f"--run_dir={tmp_path / 'x'}", f"--init_from={tmp_path / 'nowhere'}"]) == 2
    err = capsys.readouterr().err
    assert f"--init_from={tmp_path / 'nowhere'}: no such file or folder" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists()  # refused before the run folder is made
    assert main([*base, f"--run_dir={tmp_path / 'y'}", f"--init_from={tmp_path}"]) == 2
    assert "expected a mamba-ssm checkpoint folder" in capsys.readouterr().err
    assert main([*base, f"--run_dir={tmp_path / 'z'}", "--init_from_skip=head"]) == 2
    assert "train.init_from_skip" in capsys.readouterr().err
