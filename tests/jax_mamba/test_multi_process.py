"""Multi-host training as two processes on this machine (``jax.distributed`` over localhost, CPU collectives by
gloo), each with 2 host CPU devices: the same command line as on a cluster, environment variables only. The run
gives one device's per-step losses and evaluation, process 0 alone writes the run's files, the checkpoint both
processes saved resumes in one process, and each process reads only its rows of a batch. Start-up settings are
checked before anything runs."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from jax_mamba.checkpoints.run_dir import CHECKPOINT_DIR
from jax_mamba.configs import load_config
from jax_mamba.configs.schema import MeshConfig
from jax_mamba.train.distributed import (
    DistributedError,
    GlobalBatches,
    process_rows,
    settings_from_env,
)
from jax_mamba.train.loop import train
from jax_mamba.train.sharding import make_mesh
from tests.jax_mamba.training_runs import QUIET, evals, losses, records

# One Mamba-2 layer: what the processes split is the same in every layer, and each layer more only lengthens the
# compilations.
STEPS = ["--n_layer=1", "--max_steps=5", "--log_every=1", "--eval_every=5", "--save_every=5", "--eval_batches=1"]
FIRST = [*STEPS, "--stop_after_steps=3"]  # the two-process run: 3 of 5 steps (then saved), resumed in one process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(args: list[str]) -> list[subprocess.CompletedProcess]:
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "SLURM_", "OMPI_"))}
    base.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    command = [sys.executable, "-m", "jax_mamba.train", *args]
    procs = []
    for i in range(2):
        env = {
            **base,
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "JAX_NUM_PROCESSES": "2",
            "JAX_PROCESS_ID": str(i),
        }
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hosts") / "run"
    done = _two_processes(["--config=mamba2-tiny", *QUIET, *FIRST, "--mesh.data=2", "--mesh.fsdp=2",
                           f"--run_dir={folder}", "--sample_tokens=0"])  # fmt: skip
    for i, proc in enumerate(done):
        assert proc.returncode == 0, f"process {i}:\n{proc.stderr[-4000:]}"
    return folder, done


@pytest.fixture(scope="module")
def one_device_run(tmp_path_factory):
    """All 5 steps on one device, evaluated at step 3 too (where the two-process run stops): the reference of both
    tests (the evaluation interval changes no compiled program)."""
    whole = tmp_path_factory.mktemp("one") / "whole"
    train(load_config("mamba2-tiny", [*QUIET, *STEPS, "--eval_every=3"]), run_dir=whole, echo=lambda *_: None)
    return whole


def test_two_processes_train_like_one_device(two_process_run, one_device_run):
    folder, done = two_process_run
    want = {s: loss for s, loss in losses(one_device_run).items() if s <= 3}
    assert len(want) == 3
    got = losses(folder)
    np.testing.assert_allclose([got[s] for s in sorted(got)], [want[s] for s in sorted(want)], rtol=2e-6)
    step_3 = [r["eval_loss"] for r in records(one_device_run) if "eval_loss" in r and r["step"] == 3]
    np.testing.assert_allclose(evals(folder), step_3, rtol=2e-6)
    assert "done: step 3" in done[0].stdout and "done:" not in done[1].stdout  # process 0 alone prints
    assert len([r for r in records(folder) if r.get("step") == 1 and "loss" in r]) == 1  # written once
    assert '"processes": 2' in (folder / "run.json").read_text()


def test_a_two_process_checkpoint_resumes_in_one_process(two_process_run, one_device_run, tmp_path):
    """Saved by both processes (each its shards), restored onto one device, trained on: as an uninterrupted run."""
    folder, _ = two_process_run
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    for item in folder.iterdir():  # a copy, so the module's run stays as it was
        subprocess.run(["cp", "-r", str(item), str(resumed)], check=True)
    mesh_one = ["--mesh.data=1", "--mesh.fsdp=1"]
    train(load_config(str(resumed / "config.yaml"), [*QUIET, *STEPS, *mesh_one]), resume=True, run_dir=resumed,
          echo=lambda *_: None)  # fmt: skip
    got, want = losses(resumed), losses(one_device_run)
    assert sorted(got) == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([got[s] for s in range(1, 6)], [want[s] for s in range(1, 6)], rtol=2e-6)
    assert sorted(int(p.name) for p in (resumed / CHECKPOINT_DIR).iterdir() if p.name.isdigit())[-1] == 5


class _Rows:
    """A dataset that records which rows it was asked for."""

    def __init__(self, batch_size: int):
        self.batch_size, self.asked = batch_size, []

    def train_batch_rows(self, step, accum, start, stop):
        self.asked.append((start, stop))
        rows = np.arange(start, stop, dtype=np.int32)[None, :, None] + 100 * step
        return {"inputs": np.broadcast_to(rows, (accum, stop - start, 3)).copy()}


def test_global_batches_read_only_this_process_rows():
    """One process holding all devices reads all rows once; the global array holds each row where the mesh puts
    it. (With several processes each reads its own range, as ``process_rows`` gives.)"""
    mesh = make_mesh(MeshConfig(data=1, fsdp=1, context=1))
    dataset = _Rows(4)
    batches = GlobalBatches(dataset, mesh, 4, 2)
    batch = batches(7)
    assert dataset.asked == [(0, 4)] and process_rows(mesh, 4) == (0, 4)
    assert batch["inputs"].shape == (2, 4, 3)
    np.testing.assert_array_equal(np.asarray(batch["inputs"])[1, :, 0], [700, 701, 702, 703])


@pytest.mark.parametrize("config", ["mamba2-tiny", "mambavision-tiny"])
def test_dataset_rows_equal_the_whole_batch_rows(config):
    """Token corpora and in-memory images (with flips) build a process's rows alone, equal to the whole batch's."""
    from jax_mamba.tasks import task_for

    dataset = task_for(load_config(config, [*QUIET, "--batch_size=4"])).make_dataset()
    whole = dataset.train_batch(3, 2)
    part = dataset.train_batch_rows(3, 2, 1, 3)
    for key in whole:
        np.testing.assert_array_equal(part[key], whole[key][:, 1:3])


@pytest.mark.parametrize(
    "env, match",
    [
        ({"JAX_COORDINATOR_ADDRESS": "host0"}, "host:port"),
        ({"JAX_COORDINATOR_ADDRESS": "host0:1234"}, "JAX_NUM_PROCESSES must be too"),
        ({"JAX_COORDINATOR_ADDRESS": "host0:1234", "JAX_NUM_PROCESSES": "two"}, "JAX_NUM_PROCESSES must be an int"),
        ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"}, "below JAX_NUM_PROC"),
        ({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "0", "JAX_PROCESS_ID": "0"}, "int >= 1"),
    ],
)
def test_start_up_settings_are_checked(env, match):
    with pytest.raises(DistributedError, match=match):
        settings_from_env(env)


def test_start_up_settings_read():
    assert settings_from_env({}) is None
    env = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
    assert settings_from_env(env) == ("10.0.0.1:1234", 4, 3)
