"""``python -m jax_mamba.train.memory_plan``: the report's figures for a tiny config on the CPU, and its argument
checks."""

import gc
import json
import math

import pytest

from jax_mamba.configs.loader import load_config
from jax_mamba.train import memory_plan as plan


def test_report_after_compiling_and_after_steps():
    cfg = load_config("mamba2-tiny", ["--batch_size=2", "--seq_len=64", "--model.d_model=512", "--model.n_layer=2"])
    reports: list[dict] = []
    gc.collect()  # what earlier tests left unreachable goes now, not in the middle of the plan
    before = sum(plan.live_bytes_per_device().values())  # arrays earlier tests in this process still hold
    plan.memory_plan(cfg, steps=2, emit=reports.append)
    first, second = reports
    assert first["mesh"] == {"data": 1, "fsdp": 1, "context": 1} and first["parameters"] > 2_000_000
    params_and_adam_gib = 3 * 4 * first["parameters"] / 2**30  # float32 parameters and two AdamW moments
    (held,) = first["after_init_gib"].values()
    assert held - before == pytest.approx(params_and_adam_gib, rel=0.01)
    step = first["step_plan_gib"]
    assert step["argument"] == pytest.approx(held - before, rel=0.01) and step["alias"] == step["argument"]  # donated
    assert step["temp"] > 0 and step["peak_estimate"] >= step["argument"]
    assert second["steps"] == 2 and math.isfinite(second["loss"])


def test_cli_prints_json_and_checks_its_arguments(capsys):
    assert plan.main(["--config", "mamba2-tiny", "--batch_size=2", "--seq_len=32"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert json.loads(line)["config"] == "mamba2-tiny"
    with pytest.raises(SystemExit):
        plan.main(["--config", "mamba2-tiny", "--steps", "-1"])
    assert "--steps must be >= 0, got -1" in capsys.readouterr().err
    assert plan.main(["--config", "mamba2-tiny", "--mesh.fsdp_gather=all"]) == 2
    assert "mesh.fsdp_gather" in capsys.readouterr().err
