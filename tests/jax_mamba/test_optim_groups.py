"""Parameter groups of the optimizer: ``optim.freeze`` / ``optim.train_only`` keep parameters unchanged (no optimizer
state for them, the gradient norm clipped over the trained ones), ``optim.lr_scale`` multiplies a group's learning
rate, patterns that match nothing are named errors, and a run with groups resumes exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_mamba.checkpoints.store import CheckpointStore
from jax_mamba.configs import ConfigError, load_config
from jax_mamba.configs.schema import OptimConfig
from jax_mamba.tasks import task_for
from jax_mamba.train.optim import FROZEN, make_optimizer, parameter_groups
from jax_mamba.train.step import initial_variables
from tests.jax_mamba.training_runs import losses, whole_and_resumed_runs

NAMES = ["backbone.embedding.embedding", "backbone.layers.0.mixer.A_log", "backbone.layers.0.norm.weight"]
NAMES += ["head.kernel"]
HEAD = ("head.*",)


def groups(**fields) -> dict[str, str]:
    return parameter_groups(OptimConfig(**fields), NAMES, HEAD)


def test_patterns_head_and_first_matching_scale_pick_the_groups():
    assert groups(freeze="backbone.layers.*") == {
        "backbone.embedding.embedding": "lr x 1",
        "backbone.layers.0.mixer.A_log": FROZEN,
        "backbone.layers.0.norm.weight": FROZEN,
        "head.kernel": "lr x 1",
    }
    only_head = groups(train_only="head")
    assert [n for n, g in only_head.items() if g != FROZEN] == ["head.kernel"]
    scaled = groups(lr_scale="*.norm.*=0.5, backbone.*=0.1", freeze="backbone.embedding.*")
    assert scaled["backbone.layers.0.norm.weight"] == "lr x 0.5"  # the first matching entry
    assert scaled["backbone.layers.0.mixer.A_log"] == "lr x 0.1"
    assert scaled["backbone.embedding.embedding"] == FROZEN and scaled["head.kernel"] == "lr x 1"
    with pytest.raises(ConfigError, match=r"optim\.freeze: pattern 'backbone\.layer\.\*' matches no parameter"):
        groups(freeze="backbone.layer.*")
    with pytest.raises(ConfigError, match=r"optim\.lr_scale: pattern 'decoder\.\*'"):
        groups(lr_scale="decoder.*=0.1")


def test_bad_group_settings_are_refused_when_loaded():
    with pytest.raises(ConfigError, match=r"optim\.lr_scale.*PATTERN=SCALE"):
        load_config("mamba2-tiny", ["--lr_scale=backbone.*"])
    with pytest.raises(ConfigError, match=r"optim\.lr_scale"):
        load_config("mamba2-tiny", ["--lr_scale=backbone.*=-1"])
    with pytest.raises(ConfigError, match=r"optim\.freeze.*train_only"):
        load_config("mamba2-tiny", ["--freeze=head", "--train_only=head"])


def test_frozen_parameters_stay_and_scaled_groups_move_by_their_scale(rng):
    params = {n: jnp.asarray(rng.normal(size=(3, 2)), jnp.float32) for n in NAMES}
    grads = {n: jnp.asarray(rng.normal(size=(3, 2)), jnp.float32) for n in NAMES}
    decay = dict.fromkeys(NAMES, True)
    settings = dict(lr=0.1, warmup_steps=0, grad_clip=0.0)
    plain = make_optimizer(OptimConfig(**settings), 10, decay, HEAD)
    grouped = make_optimizer(
        OptimConfig(**settings, freeze="backbone.embedding.*", lr_scale="backbone.layers.*=0.25"), 10, decay, HEAD
    )
    want, _ = plain.update(grads, plain.init(params), params)
    state = grouped.init(params)
    got, _ = grouped.update(grads, state, params)
    assert not np.any(np.asarray(got["backbone.embedding.embedding"]))
    np.testing.assert_allclose(got["head.kernel"], want["head.kernel"], rtol=1e-6)
    for name in ("backbone.layers.0.mixer.A_log", "backbone.layers.0.norm.weight"):
        np.testing.assert_allclose(got[name], 0.25 * np.asarray(want[name]), rtol=1e-6)
    moments = [x for x in jax.tree.leaves(state) if np.shape(x) == (3, 2)]
    assert len(moments) == 2 * (len(NAMES) - 1)  # AdamW's two moments for every trained parameter, none frozen


def test_clipping_counts_the_trained_gradients_only():
    """Adam's first step with eps 1 is -g / (|g| + 1): unclipped (norm 5 < 10) for "a", as if the frozen "b" (norm
    500) were not there; clipped by 10/500 it would be 50x smaller."""
    params = {"a": jnp.ones(2), "b": jnp.ones(2)}
    grads = {"a": jnp.asarray([3.0, 4.0]), "b": jnp.asarray([300.0, 400.0])}
    settings = dict(lr=1.0, warmup_steps=0, weight_decay=0.0, grad_clip=10.0, eps=1.0, freeze="b")
    tx = make_optimizer(OptimConfig(**settings), 10, {"a": False, "b": False})
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["a"], [-3 / 4, -4 / 5], rtol=1e-6)
    assert not np.any(np.asarray(updates["b"]))


def test_a_run_with_groups_resumes_exactly(tmp_path):
    overrides = ["--n_layer=1", "--batch_size=2", "--seq_len=16", "--eval_batches=1"]
    overrides += ["--freeze=backbone.layers.0.mixer.in_proj.*", "--lr_scale=backbone.norm_f.*=0.5"]
    whole, parts, _ = whole_and_resumed_runs("mamba2-tiny", overrides, tmp_path, steps=2, stop_after=1, every=1)
    assert losses(parts) == losses(whole) and sorted(losses(whole)) == [1, 2]
    cfg = load_config("mamba2-tiny", overrides)
    _, initial, _, _, _ = initial_variables(cfg, task_for(cfg))
    trained = CheckpointStore(whole / "checkpoints", 3).restore_params(2, initial)
    for name in initial:
        moved = not np.array_equal(np.asarray(trained[name]), np.asarray(initial[name]))
        assert moved == (not name.startswith("backbone.layers.0.mixer.in_proj.")), name
