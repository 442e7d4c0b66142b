"""The learning-rate schedule as the train step computes it: from its constants passed as an argument (so that
trainings differing only in lr, warm-up or max_steps compile to one program), at optax's warm-up cosine rates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_mamba.configs import load_config
from jax_mamba.configs.schema import OptimConfig
from jax_mamba.tasks import task_for
from jax_mamba.train.optim import learning_rate_schedule, schedule_constants, traced_schedule
from jax_mamba.train.step import init_training


@pytest.mark.parametrize(
    "fields,max_steps",
    [
        ({}, 10),
        ({"warmup_steps": 0}, 7),
        ({"warmup_steps": 3, "lr": 1e-3, "min_lr": 1e-5}, 12),
        ({"warmup_steps": 20}, 5),  # the warm-up longer than the run
        ({"lr": 0.0, "min_lr": 0.0}, 6),
        ({"warmup_steps": 1, "lr": 3e-4, "min_lr": 3e-4}, 1),
    ],
)
def test_traced_schedule_gives_optax_rates(fields, max_steps):
    cfg = OptimConfig(**fields)
    counts = np.arange(max_steps + 4)  # past the end too
    want = np.asarray(learning_rate_schedule(cfg, max_steps)(counts))
    got = np.asarray(jax.jit(lambda c, n: traced_schedule(c)(n))(schedule_constants(cfg, max_steps), counts))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)


def test_trainings_differing_in_lr_warmup_and_max_steps_share_one_program_at_their_own_rates():
    setups, args = [], None
    for overrides in (["--lr=1e-3", "--max_steps=5"], ["--lr=2e-3", "--warmup_steps=1", "--max_steps=9"]):
        cfg = load_config("mamba2-tiny", ["--batch_size=1", "--seq_len=16", *overrides])
        setup = init_training(cfg, task_for(cfg))
        ids = jnp.zeros((1, 1, 16), jnp.int32)
        batch = {"inputs": ids, "targets": ids, "mask": jnp.ones((1, 1, 16), jnp.float32)}
        args = (setup.params, setup.opt_state, setup.state, batch, np.int32(3))
        setups.append((cfg, setup, args))
    texts = [setup.train_step.lower(*args).as_text() for _, setup, args in setups]
    assert texts[0] == texts[1]
    for cfg, setup, args in setups:
        *_, metrics = setup.train_step(*args)
        want = float(learning_rate_schedule(cfg.optim, cfg.train.max_steps)(3))
        assert float(metrics["lr"]) == pytest.approx(want, rel=1e-6)
