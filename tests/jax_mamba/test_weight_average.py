"""The moving average of the weights (``optim.ema_decay``): its arithmetic, kept in the optimizer state (so
checkpointed), evaluated beside the weights (``ema_*`` metrics), and a run keeping one resumes exactly."""

import jax.numpy as jnp
import numpy as np
import pytest

from jax_mamba.checkpoints.store import CheckpointStore
from jax_mamba.configs import ConfigError, load_config
from jax_mamba.configs.schema import OptimConfig
from jax_mamba.tasks import task_for
from jax_mamba.train.optim import averaged_weights, make_optimizer
from jax_mamba.train.step import init_training
from tests.jax_mamba.training_runs import losses, records, whole_and_resumed_runs


def test_the_average_follows_the_weights_after_each_step(rng):
    params = {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "b": jnp.asarray(rng.normal(size=3))}
    tx = make_optimizer(OptimConfig(lr=0.1, warmup_steps=0, ema_decay=0.75), 10, {"w": True, "b": False})
    state = tx.init(params)
    expected = {k: np.asarray(v, np.float64) for k, v in params.items()}
    assert all(np.array_equal(averaged_weights(state)[k], params[k]) for k in params)  # starts at the weights
    for _ in range(3):
        grads = {k: jnp.asarray(rng.normal(size=v.shape), jnp.float32) for k, v in params.items()}
        updates, state = tx.update(grads, state, params)
        params = {k: params[k] + updates[k] for k in params}
        expected = {k: 0.75 * expected[k] + 0.25 * np.asarray(params[k], np.float64) for k in params}
    for k in params:
        np.testing.assert_allclose(averaged_weights(state)[k], expected[k], rtol=1e-6, atol=1e-7)
    assert averaged_weights(make_optimizer(OptimConfig(), 10, {"w": True}).init({"w": params["w"]})) is None
    with pytest.raises(ConfigError, match=r"optim\.ema_decay"):
        load_config("mamba2-tiny", ["--ema_decay=1.0"])


def test_a_run_evaluates_and_checkpoints_the_average_and_resumes_exactly(tmp_path):
    overrides = ["--n_layer=1", "--batch_size=2", "--seq_len=16", "--eval_batches=1", "--warmup_steps=0"]
    overrides += ["--ema_decay=0.5"]
    whole, parts, _ = whole_and_resumed_runs("mamba2-tiny", overrides, tmp_path, steps=2, stop_after=1, every=1)

    def evaluations(run) -> list[tuple[float, float]]:
        return [(r["eval_loss"], r["ema_eval_loss"]) for r in records(run) if "eval_loss" in r]

    assert losses(parts) == losses(whole) and evaluations(parts) == evaluations(whole)
    assert len(evaluations(whole)) == 2 and all(a != b for a, b in evaluations(whole))  # the average moves slower
    cfg = load_config("mamba2-tiny", overrides)
    setup = init_training(cfg, task_for(cfg))
    store = CheckpointStore(whole / "checkpoints", 3)
    first, second = (store.restore(s, setup.params, setup.opt_state, setup.state)[:2] for s in (1, 2))
    for name, initial in setup.params.items():
        want = 0.25 * np.asarray(initial) + 0.25 * np.asarray(first[0][name]) + 0.5 * np.asarray(second[0][name])
        np.testing.assert_allclose(averaged_weights(second[1])[name], want, rtol=1e-5, atol=1e-7, err_msg=name)
