"""MambaVision through the shared training loop: a tiny model learns the embedded shapes well above chance; batch
statistics and drop-path draws resume exactly; image folders from the command line."""

import json

import numpy as np
import orbax.checkpoint as ocp
import pytest

from jax_mamba.configs import load_config
from jax_mamba.data.export_shapes import export
from jax_mamba.train.__main__ import main
from jax_mamba.train.loop import train
from tests.jax_mamba.training_runs import QUIET, evals, losses, records, whole_and_resumed_runs


@pytest.mark.slow
def test_tiny_mambavision_learns_the_shapes(tmp_path):
    """100 steps (top-1 about 0.9 whatever the seed), evaluated and saved at the end only."""
    overrides = [*QUIET, "--max_steps=100", "--eval_every=100000", "--save_every=100000"]
    result = train(load_config("mambavision-tiny", overrides), run_dir=tmp_path, echo=lambda *_: None)
    assert result.step == 100 and result.traces == 1 and result.unit == "images" and result.items_per_s > 0
    assert result.eval["eval_top1"] > 0.6  # ten classes: chance is 0.1
    assert result.eval["eval_top5"] >= result.eval["eval_top1"]
    train_records = [r for r in records(tmp_path) if "top1" in r]
    assert train_records and all("images_per_s" in r for r in train_records)
    assert (tmp_path / "loss_curve.png").stat().st_size > 0
    saved = ocp.PyTreeCheckpointer().metadata(tmp_path / "checkpoints" / "100" / "state").item_metadata.tree
    assert "levels.0.blocks.0.norm1.running_var" in saved["model_state"]  # batch statistics are checkpointed


def test_resume_continues_batch_statistics_and_drop_path(tmp_path):
    """With the recipe's draws too: RandAugment, random erasing, mixup / cutmix and the weight average (evaluated)."""
    overrides = ["--batch_size=4", "--data.num_images=60", "--data.image_size=32", "--drop_path_rate=0.5"]
    overrides += [
        "--rand_augment=rand-m9-mstd0.5-inc1",
        "--random_erase=0.5",
        "--mixup_alpha=0.8",
        "--cutmix_alpha=1.0",
        "--ema_decay=0.9",
    ]
    whole, parts, _ = whole_and_resumed_runs("mambavision-tiny", overrides, tmp_path, steps=6, stop_after=3, every=3)
    assert losses(parts) == losses(whole) and sorted(losses(whole)) == list(range(1, 7))
    assert evals(parts) == evals(whole)  # eval uses the running statistics: those resumed too
    averaged = [r["ema_eval_loss"] for r in records(parts) if "ema_eval_loss" in r]
    assert averaged == [r["ema_eval_loss"] for r in records(whole) if "ema_eval_loss" in r] and len(averaged) == 2


def test_command_line_trains_on_an_image_folder(tmp_path, capsys):
    export(tmp_path / "images", 40, 40, fmt="png")
    run = tmp_path / "run"
    argv = ["--config", "mambavision-tiny", "--data", str(tmp_path / "images"), f"--run_dir={run}", *QUIET]
    assert main([*argv, "--max_steps=2", "--batch_size=4", "--image_size=32", "--eval_batches=1"]) == 0
    assert "images/s" in capsys.readouterr().out
    info = json.loads((run / "run.json").read_text())
    assert info["data"]["kind"] == "image_folder" and info["data"]["classes"] == 10
    assert main(["--config", "mambavision-tiny", "--data", str(tmp_path / "nowhere"), *QUIET]) == 2
    assert "data.path" in capsys.readouterr().err
    assert main(["--config", "mambavision-tiny", "--model.depths=[1,1,2]", *QUIET]) == 2
    assert "model.depths" in capsys.readouterr().err
    too_few = ["--config", "mambavision-tiny", "--num_classes=5", "--max_steps=1", *QUIET]
    assert main([*too_few, f"--run_dir={tmp_path / 'few'}"]) == 2
    assert "model.num_classes=5" in capsys.readouterr().err
    assert np.isfinite(json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["images_per_s_mean"])
