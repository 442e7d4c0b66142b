"""Fine-tuning from weights written by the reference's own code (random weights, this machine): a mamba-ssm
``save_pretrained`` folder and an NVlabs training checkpoint (``.pth.tar``) start a run through ``--init_from``
whose first loss is the loaded PyTorch model's loss on the same batch; the language model's run resumes exactly;
another class count is refused in one line, and ``--init_from_skip=head`` leaves the classifier fresh."""

import numpy as np
import pytest

from jax_mamba.checkpoints.init_from import fit_weights, read_weights
from jax_mamba.configs import load_config
from jax_mamba.tasks import task_for
from jax_mamba.train.__main__ import main
from jax_mamba.train.step import variable_shapes
from tests.jax_mamba.training_runs import QUIET, losses, whole_and_resumed_runs

torch = pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")

ACCUM = 2  # whole_and_resumed_runs accumulates 2 micro-batches a step


def first_batch(cfg, accum: int = ACCUM) -> dict:
    """The (micro-batches, batch, ...) arrays of the run's first step."""
    batch = task_for(cfg).make_dataset().train_batch(0, accum)
    assert np.all(np.asarray(batch["mask"]) == 1)  # all real rows: the logged loss is the mean of every row's
    return batch


def test_a_mamba_ssm_folder_fine_tunes_from_its_loss_and_resumes(cpu_reference, tmp_path):
    from torch_reference.lm import TorchLM

    overrides = ["--n_layer=1", "--batch_size=2", "--seq_len=32", "--eval_batches=1", "--seed=11"]
    cfg = load_config("mamba1-tiny", overrides)  # the seed draws the fresh weights (all replaced) and the batches
    theirs = TorchLM(cpu_reference, cfg.model, seed=3)
    theirs.model.save_pretrained(str(tmp_path / "theirs"))
    batch = first_batch(cfg)
    inputs, targets = (np.asarray(batch[k]).reshape(-1, cfg.train.seq_len) for k in ("inputs", "targets"))
    _, their_loss, _ = theirs.loss_and_grads(inputs, targets)

    tuned = [*overrides, f"--init_from={tmp_path / 'theirs'}"]
    whole, parts, _ = whole_and_resumed_runs("mamba1-tiny", tuned, tmp_path, steps=2, stop_after=1, every=1)
    np.testing.assert_allclose(losses(whole)[1], their_loss, rtol=2e-5)
    assert losses(parts) == losses(whole)


def test_an_nvlabs_checkpoint_fine_tunes_from_its_loss(cpu_reference, tmp_path, capsys):
    """One step (resuming such a run is the language model's case above: the source is read only at the start)."""
    from jax_mamba.checkpoints.convert_mamba_vision import to_nvlabs_kwargs
    from torch_reference.mamba_vision import TorchMambaVision

    overrides = ["--batch_size=4", "--data.num_images=40", "--data.image_size=32", "--drop_path_rate=0"]
    overrides += ["--eval_batches=1", "--seed=11", *QUIET]
    cfg = load_config("mambavision-tiny", overrides)
    theirs = TorchMambaVision(cpu_reference, cfg.model, seed=3)
    state = {f"module.{k}": v for k, v in theirs.model.state_dict().items()}  # their training script's layout
    kwargs = to_nvlabs_kwargs(cfg.model)
    torch.save({"state_dict": state, "arch": "custom", "kwargs": kwargs}, tmp_path / "model_best.pth.tar")
    task = task_for(cfg)
    batch = first_batch(cfg, accum=1)
    images, labels = np.asarray(task.normalize(batch["images"][0])), np.asarray(batch["labels"][0])
    _, their_loss, _, _ = theirs.loss_and_grads(images, labels, label_smoothing=cfg.train.label_smoothing)

    tuned = [*overrides, f"--init_from={tmp_path / 'model_best.pth.tar'}"]
    one_step = ["--max_steps=1", "--eval_every=1", "--save_checkpoints=false", f"--run_dir={tmp_path / 'run'}"]
    assert main(["--config", "mambavision-tiny", *tuned, *one_step]) == 0  # the command line's own path
    np.testing.assert_allclose(losses(tmp_path / "run")[1], their_loss, rtol=2e-5)

    argv = ["--config", "mambavision-tiny", *tuned, "--num_classes=12", f"--run_dir={tmp_path / 'twelve'}"]
    assert main(argv) == 2  # refused before any work
    assert "of another shape (head.bias (10,) there, (12,) here" in capsys.readouterr().err
    twelve = load_config("mambavision-tiny", [*overrides, "--num_classes=12"])
    task = task_for(twelve)
    weights = read_weights(tmp_path / "model_best.pth.tar", twelve.family, twelve.model)
    fitted = fit_weights(weights, *variable_shapes(twelve, task), "head", task.head_patterns)
    assert fitted.info["skipped"] == ["head.bias", "head.kernel"] and "head.kernel" not in fitted.params
    assert fitted.state.keys() == weights.state.keys()  # the batch statistics load too
