"""The PyTorch side of compare.throughput (mamba-ssm, NVlabs' MambaVision), run here on the CPU fallback."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


def test_train_bench_runs_and_learns(cpu_reference, capsys):
    from torch_reference.train_bench import main

    assert (
        main(
            [
                "--config",
                "mamba2-tiny",
                "--steps",
                "8",
                "--batch_size",
                "4",
                "--seq_len",
                "32",
                "--device",
                "cpu",
                "--lr=3e-3",
                "--warmup_steps=0",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["framework"] == "torch" and result["items_per_s"] > 0 and "cpu" in result["reference"]
    assert result["unit"] == "tokens" and result["mode"] == "training"
    assert np.isfinite(result["final_loss"]) and result["final_loss"] < np.log(256)  # below uniform over bytes


@pytest.mark.parametrize("inference", [False, True])
def test_train_bench_runs_nvlabs_mambavision(cpu_reference, capsys, inference):
    from torch_reference.train_bench import main

    flags = ["--inference"] if inference else []
    argv = ["--config", "mambavision-tiny", "--steps", "3", "--batch_size", "4", "--device", "cpu", *flags]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["unit"] == "images" and result["items_per_s"] > 0
    assert result["mode"] == ("inference" if inference else "training")
    assert result["parameters"] == 582_194  # NVlabs' model from our config: the same size as ours


def test_train_bench_runs_graph_mamba(cpu_reference, capsys):
    """Graph-Mamba on PyG tensors: unit graphs, the task's loss, every parameter decayed (GraphGPS's AdamW)."""
    from torch_reference.train_bench import _GraphMamba, main

    argv = ["--config", "graph-mamba-tiny", "--steps", "3", "--batch_size", "4", "--device", "cpu"]
    assert main([*argv, "--data.num_graphs=24"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["unit"] == "graphs" and result["items_per_s"] > 0 and np.isfinite(result["final_loss"])
    assert result["parameters"] == 31_166 and "channels_last" not in result["settings"]  # the size of ours
    from jax_mamba.configs import load_config

    runner = _GraphMamba(cpu_reference, load_config("graph-mamba-tiny"))
    decayed, plain = (g["params"] for g in runner.optimizer.param_groups)
    assert len(decayed) == len(list(runner.model.parameters())) and not plain


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_train_bench_under_torchrun_trains_as_one_process(cpu_reference, capsys, parallel):
    """Two processes (gloo) under DDP or FSDP2, each on its half of every batch: the same final loss as one process
    on the whole batches, and one JSON line (from the first process)."""
    import subprocess
    import sys

    from torch_reference.train_bench import main

    args = ["--config", "mamba2-tiny", "--steps", "3", "--batch_size", "4", "--seq_len", "32", "--device", "cpu"]
    assert main(args) == 0
    single = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command = [*launcher, "-m", "torch_reference.train_bench", *args, f"--parallel={parallel}"]
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["processes"] == 2 and result["parameters"] == single["parameters"]
    assert parallel.upper()[:3] in result["settings"].upper()
    np.testing.assert_allclose(result["final_loss"], single["final_loss"], rtol=1e-5)


def test_train_bench_parallel_needs_torchrun(cpu_reference, monkeypatch):
    from torch_reference.train_bench import main

    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="needs torchrun"):
        main(["--config", "mamba2-tiny", "--steps", "2", "--device", "cpu", "--parallel", "ddp"])


def test_train_bench_keeps_jax_off_the_gpu():
    """JAX only reads configs and makes batches in the reference's processes: it stays off the GPUs, which are
    torch's (part of the fix for every torchrun process landing on GPU 0, NCCL: "Duplicate GPU detected")."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    probe = "import os, torch_reference.train_bench; print(os.environ['JAX_PLATFORMS'])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["cpu"]


def test_train_bench_follows_our_learning_rate_schedule(cpu_reference):
    """Each update's rate is ours (``learning_rate_schedule`` over train.max_steps: warmup from 0, then cosine to
    min_lr), so that the two sides' losses after the same steps are comparable."""
    from jax_mamba.configs.loader import load_config
    from jax_mamba.tasks import task_for
    from jax_mamba.train.optim import learning_rate_schedule
    from torch_reference.train_bench import make_runner

    overrides = ["--max_steps=5", "--warmup_steps=2", "--lr=2e-3", "--min_lr=1e-4", "--batch_size=2", "--seq_len=16"]
    cfg = load_config("mamba2-tiny", overrides)
    runner = make_runner(cpu_reference, cfg)
    dataset = task_for(cfg).make_dataset()
    used = []
    for step in range(5):
        used.append(runner.optimizer.param_groups[0]["lr"])
        runner.train_step(runner.inputs(dataset.train_batch(step, 1)))
    ours = np.asarray(learning_rate_schedule(cfg.optim, 5)(np.arange(5)))
    assert ours[0] == 0.0 and ours[2] == 2e-3 and ours[-1] > 1e-4  # warmup, peak, on the way down
    np.testing.assert_allclose(used, ours, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("config", ["mamba1-tiny", "mambavision-tiny", "graph-mamba-tiny"])
def test_reference_runner_starts_from_our_initial_weights(cpu_reference, config):
    """train_curve's runner holds exactly the variables our training loop initializes for the seed (converted by the
    family's table; a tied head through its twin), and loading is strict: a variable left out is named."""
    from jax_mamba.checkpoints.convert_table import ConversionError
    from jax_mamba.configs.loader import load_config
    from torch_reference.train_curve import our_initial_variables, reference_runner

    cfg = load_config(config, ["--seed=3", "--optim.name=adamw", "--batch_size=2"])
    _, runner = reference_runner(cfg, "cpu")
    params, state = our_initial_variables(cfg)
    expected = runner.our_state_dict(params, state)
    held = runner.module.state_dict()
    assert set(expected) <= set(held) and set(held) - set(expected) <= set(runner.tied)
    for name, value in expected.items():
        np.testing.assert_array_equal(held[name].numpy(), value, err_msg=name)
    assert runner.model.training
    dropped = next(iter(params))
    with pytest.raises(ConversionError, match=f"missing .*{dropped}"):
        runner.load_ours({k: v for k, v in params.items() if k != dropped}, state)
