"""Training: outputs and falling loss, no retracing, exact resume, checkpoint retention, NaN stop that keeps the last
good checkpoint, no overwriting, gradient accumulation, the command line."""

import hashlib
import shutil
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jax_mamba.checkpoints.run_dir import RunDirError
from jax_mamba.configs import load_config
from jax_mamba.models import ParamLayout
from jax_mamba.tasks import task_for
from jax_mamba.train.__main__ import main
from jax_mamba.train.loop import TrainingDiverged, TrainResult, train
from jax_mamba.train.optim import learning_rate_schedule
from jax_mamba.train.step import make_train_step
from tests.jax_mamba.training_runs import QUIET, losses, records, whole_and_resumed_runs

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # jax.monitoring: one compilation finished


def tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> tuple[Path, object, TrainResult]:
    """(folder, config, result) of a 24-step Mamba-2 run saved at steps 12 and 24, shared by the tests that check a
    finished run or start from one with checkpoints (those that change it work on a copy)."""
    folder = tmp_path_factory.mktemp("saved")
    cfg = load_config("mamba2-tiny", [*QUIET, "--max_steps=24", "--log_every=1", "--eval_every=12", "--save_every=12"])
    return folder, cfg, train(cfg, run_dir=folder, echo=lambda *_: None)


def test_training_writes_outputs_and_loss_falls(saved_run):
    folder, _, result = saved_run
    assert result.step == 24 and result.traces == 1  # traced once: no retracing after step 1
    steps = losses(folder)
    assert np.mean([steps[s] for s in (21, 22, 23, 24)]) < np.mean([steps[s] for s in (1, 2, 3, 4)]) - 0.5
    assert {"eval_loss", "eval_bits_per_byte"} <= set(result.eval)
    for name in ("config.yaml", "run.json", "metrics.jsonl", "loss_curve.png"):
        assert (folder / name).stat().st_size > 0, name
    assert sorted(int(p.name) for p in (folder / "checkpoints").iterdir()) == [12, 24]


def test_save_checkpoints_false_writes_none(tmp_path):
    """Throughput runs time the steps only: with ``--save_checkpoints=false`` no checkpoint is written, not even at
    the end, while the metrics and the end record still are."""
    cfg = load_config("mamba2-tiny", [*QUIET, "--max_steps=4", "--save_every=2", "--save_checkpoints=false"])
    result = train(cfg, run_dir=tmp_path, echo=lambda *_: None)
    assert result.step == 4 and np.isfinite(result.loss)
    checkpoints = tmp_path / "checkpoints"
    assert not checkpoints.exists() or not any(checkpoints.iterdir())
    assert next(r for r in records(tmp_path) if r.get("event") == "end")["step"] == 4


def _loop_line(stack: traceback.StackSummary) -> str:
    """The training loop's innermost line on ``stack``: its function and source text."""
    frame = [f for f in stack if f.filename.endswith("jax_mamba/train/loop.py")][-1]
    return f"{frame.name}: {frame.line}"


def test_the_loop_compiles_nothing_between_steps_and_logs_the_rate_used(tmp_path):
    """Anything compiled between steps stalls the device (the first eager call of the learning-rate schedule, made
    when the loop logged its first step, took 0.6 s on a GPU inside the timed steps): in the loop, only the setup,
    the train step and the evaluation compile. The logged ``lr`` is the schedule's value at the step's update."""
    jax.clear_caches()  # eager operations compiled by earlier tests would hide a compilation here
    compiled = []
    cache_was_on = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)  # nor may the test session's cache (conftest)

    def listener(event: str, secs: float, **_) -> None:
        if event == BACKEND_COMPILE:
            compiled.append(_loop_line(traceback.extract_stack()))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        overrides = ["--max_steps=6", "--log_every=1", "--warmup_steps=4", "--eval_every=3", "--save_every=3"]
        cfg = load_config("mamba2-tiny", [*QUIET, *overrides])
        train(cfg, run_dir=tmp_path, echo=lambda *_: None)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
        jax.config.update("jax_enable_compilation_cache", cache_was_on)
    allowed = (
        "_train: setup = init_training(",
        "_train: params, opt_state, model_state, out = train_step(",
        "_evaluate:",
    )
    assert any(line.startswith(allowed[1]) for line in compiled)
    assert [line for line in compiled if not line.startswith(allowed)] == []
    logged = [r for r in records(tmp_path) if "loss" in r and "event" not in r]
    assert [r["step"] for r in logged] == [1, 2, 3, 4, 5, 6]
    schedule = learning_rate_schedule(cfg.optim, cfg.train.max_steps)
    np.testing.assert_allclose([r["lr"] for r in logged], [float(schedule(r["step"] - 1)) for r in logged], rtol=1e-6)
    assert logged[0]["lr"] == 0.0 and logged[4]["lr"] == pytest.approx(cfg.optim.lr)


def test_resume_continues_the_same_trajectory(tmp_path):
    """Stopped after step 3, between the saves every 2 steps: the stop saves its own checkpoint to resume from."""
    whole, parts, first = whole_and_resumed_runs("hybrid-tiny", [], tmp_path, steps=4, stop_after=3, every=2)
    assert first.step == 3
    assert losses(parts) == losses(whole)  # bit-identical: same data order, same state
    assert sorted(losses(parts)) == list(range(1, 5))
    assert any(r.get("event") == "resume" and r["step"] == 3 for r in records(parts))


def test_keeps_the_last_k_checkpoints(tmp_path):
    cfg = load_config(
        "mamba1-tiny", [*QUIET, "--max_steps=4", "--save_every=1", "--keep_checkpoints=2", "--eval_every=4"]
    )
    train(cfg, run_dir=tmp_path, echo=lambda *_: None)
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [3, 4]


def test_divergence_stops_and_keeps_the_last_good_checkpoint(tmp_path, saved_run):
    shutil.copytree(saved_run[0], tmp_path, dirs_exist_ok=True)
    before = tree_digest(tmp_path / "checkpoints")
    blow_up = load_config(
        str(tmp_path / "config.yaml"), [*QUIET, "--max_steps=32", "--lr=1e30", "--min_lr=0", "--warmup_steps=0"]
    )
    with pytest.raises(TrainingDiverged, match=r"diverged at step \d+.*last good checkpoint is step 24"):
        train(blow_up, resume=True, run_dir=tmp_path, echo=lambda *_: None)
    assert tree_digest(tmp_path / "checkpoints") == before
    assert any(r.get("event") == "diverged" for r in records(tmp_path))


def damage(step_dir, rng) -> None:
    """What a new user would try: random bytes over part of every data file of a checkpoint."""
    for file in (step_dir / "state").rglob("d/*"):
        data = bytearray(file.read_bytes())
        size = min(len(data), 4096)
        at = int(rng.integers(0, len(data) - size + 1))
        data[at : at + size] = rng.bytes(size)
        file.write_bytes(bytes(data))


def test_resume_past_a_damaged_checkpoint(tmp_path, rng):
    """The newest checkpoint's data files overwritten with random bytes: --resume names it in one line, keeps it
    (moved aside) and continues from the newest intact one; with every checkpoint damaged it stops in one line."""
    cfg = load_config("mamba1-tiny", [*QUIET, "--max_steps=4", "--save_every=2", "--eval_every=4"])
    train(cfg, run_dir=tmp_path, echo=lambda *_: None)
    damage(tmp_path / "checkpoints" / "4", rng)
    damaged = tree_digest(tmp_path / "checkpoints" / "4")
    said = []
    more = load_config(str(tmp_path / "config.yaml"), [*QUIET, "--max_steps=6"])
    result = train(more, resume=True, run_dir=tmp_path, echo=said.append)
    warning = next(s for s in said if s.startswith("warning"))
    assert "checkpoint step 4 is damaged" in warning and "resuming from step 2" in warning and "\n" not in warning
    assert len(warning) < 600 and result.step == 6
    moved = [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith("damaged-4-")]
    assert len(moved) == 1 and tree_digest(moved[0]) == damaged  # kept as it was
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == [2, 4, 6]
    assert [r["step"] for r in records(tmp_path) if r.get("event") == "resume"] == [2]
    for step in (2, 4, 6):
        damage(tmp_path / "checkpoints" / str(step), rng)
    before = tree_digest(tmp_path / "checkpoints")
    with pytest.raises(RunDirError, match=r"none of the 3 checkpoints .* restores; the newest \(step 6\)") as err:
        train(load_config(str(tmp_path / "config.yaml"), [*QUIET, "--max_steps=8"]), resume=True, run_dir=tmp_path)
    assert len(str(err.value)) < 800 and "\n" not in str(err.value)
    assert tree_digest(tmp_path / "checkpoints") == before  # nothing moved or deleted when nothing restores


def test_a_new_run_never_overwrites_checkpoints(tmp_path, saved_run):
    folder, cfg, _ = saved_run
    before = tree_digest(folder)
    with pytest.raises(RunDirError, match="already holds checkpoints"):
        train(cfg, run_dir=folder, echo=lambda *_: None)
    assert tree_digest(folder) == before
    with pytest.raises(RunDirError, match="no checkpoint to resume"):
        train(cfg, resume=True, run_dir=tmp_path / "elsewhere", echo=lambda *_: None)


def test_gradient_accumulation_equals_one_big_batch(rng):
    cfg = load_config("mamba2-tiny")
    task = task_for(cfg)
    layout, params, state = ParamLayout.split(task.build_model(nnx.Rngs(0)))
    tx = optax.sgd(0.1)
    ids = rng.integers(0, 256, size=(2, 3, 17)).astype(np.int32)
    mask = rng.integers(0, 2, size=(2, 3, 16)).astype(np.float32)
    batch = {"inputs": ids[..., :-1], "targets": ids[..., 1:], "mask": mask}
    one = {k: v.reshape(1, 6, *v.shape[2:]) for k, v in batch.items()}
    copy = lambda t: jax.tree.map(jnp.array, t)  # noqa: E731  (the step donates its inputs)
    accum_step, _ = make_train_step(task, layout, tx, 2)
    single_step, _ = make_train_step(task, layout, tx, 1)
    p2, _, _, m2 = accum_step(copy(params), tx.init(params), state, batch, 0)
    p1, _, _, m1 = single_step(copy(params), tx.init(params), state, one, 0)
    np.testing.assert_allclose(float(m2["loss"]), float(m1["loss"]), rtol=1e-5)
    for k in p1:
        np.testing.assert_allclose(np.asarray(p2[k]), np.asarray(p1[k]), rtol=1e-4, atol=1e-6, err_msg=k)


def test_command_line(tmp_path, capsys):
    run = tmp_path / "cli"
    assert main(["--config", "mamba1-tiny", f"--run_dir={run}", "--max_steps=3", "--sample_tokens=6", *QUIET]) == 0
    out = capsys.readouterr().out
    assert "done: step 3" in out and "sample (" in out and "\ndef " in out  # the stdlib corpus's prompt
    assert main(["--resume", f"--run_dir={run}", "--max_steps=5", "--sample_tokens=0", *QUIET]) == 0
    assert "sample (" not in capsys.readouterr().out
    assert sorted(losses(run)) == [3, 5]
    assert main(["--config", "mamba1-tiny", "--data", str(tmp_path / "nope.txt"), *QUIET]) == 2
    assert "data.path" in capsys.readouterr().err
    assert main(["--config", "mamba1-tiny", "--model.d_model=0"]) == 2
    assert "model.d_model" in capsys.readouterr().err


def test_resume_on_fewer_devices_fits_the_saved_mesh(tmp_path, capsys):
    """A run whose config.yaml says fsdp 2 (saved on two devices) resumes on this one device: the mesh is fitted
    and said in one line, and the run continues; a mesh asked for on the command line that the devices cannot form
    is refused in one line naming it, without a traceback."""
    run = tmp_path / "fsdp"
    assert main(["--config", "mamba1-tiny", f"--run_dir={run}", "--max_steps=2", "--sample_tokens=0", *QUIET]) == 0
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("fsdp: 1", "fsdp: 2"))
    capsys.readouterr()
    assert main(["--resume", f"--run_dir={run}", "--max_steps=3", "--sample_tokens=0", *QUIET]) == 0
    out = capsys.readouterr().out
    assert f"(data 0, fsdp 2, context 1) does not fit the {len(jax.devices())} device(s) present" in out
    assert "continuing on data 1, fsdp 1, context 1" in out and sorted(losses(run)) == [2, 3]
    assert main(["--resume", f"--run_dir={run}", "--max_steps=4", "--mesh.fsdp=3", "--sample_tokens=0", *QUIET]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: mesh.fsdp=3") and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_fitted_mesh_keeps_what_the_devices_can_form():
    from jax_mamba.configs.schema import MeshConfig
    from jax_mamba.train.sharding import fits, fitted_mesh

    assert fitted_mesh(MeshConfig(fsdp=2), 4) == MeshConfig(fsdp=2)  # fits: unchanged
    assert fitted_mesh(MeshConfig(fsdp=4), 2) == MeshConfig(fsdp=2)
    assert fitted_mesh(MeshConfig(data=2, fsdp=2), 2) == MeshConfig(data=0, fsdp=2)
    assert fitted_mesh(MeshConfig(fsdp=2, context=4), 4) == MeshConfig(fsdp=2, context=2)
    assert fitted_mesh(MeshConfig(fsdp=8), 6) == MeshConfig(fsdp=2)
    for count in range(1, 9):
        for cfg in (MeshConfig(fsdp=4, context=2), MeshConfig(data=3, fsdp=2), MeshConfig(fsdp=3)):
            assert fits(fitted_mesh(cfg, count), count)


def test_bf16_compute_trains_on_cpu(tmp_path):
    cfg = load_config("hybrid-tiny", [*QUIET, "--max_steps=3", "--compute_dtype=bfloat16"])
    result = train(cfg, run_dir=tmp_path, echo=lambda *_: None)
    assert np.isfinite(result.loss) and result.traces == 1


@pytest.mark.parametrize("config", ["mamba1-tiny", "hybrid-tiny"])
def test_matmul_weights_cast_before_the_model_change_nothing(rng, config):
    """The step casts the Linear kernels to the compute dtype before the model runs (``ParamLayout.compute_casts``,
    so that FSDP gathers bf16): one bf16 step gives exactly the parameters and loss of the step without that cast,
    whose modules cast the same kernels themselves. With float32 compute nothing is listed."""
    import dataclasses

    cfg = load_config(config, ["--compute_dtype=bfloat16"])
    task = task_for(cfg)
    layout, params, state = ParamLayout.split(task.build_model(nnx.Rngs(0)))
    names = [name for name, dtype in layout.compute_casts]
    assert names and all(n.endswith(".kernel") and n in params for n in names)
    assert {dtype for _, dtype in layout.compute_casts} == {"bfloat16"}
    plain = dataclasses.replace(layout, compute_casts=())
    tx = optax.adamw(1e-3)
    ids = rng.integers(0, 256, size=(1, 2, 17)).astype(np.int32)
    batch = {"inputs": ids[..., :-1], "targets": ids[..., 1:], "mask": np.ones((1, 2, 16), np.float32)}
    copy = lambda t: jax.tree.map(jnp.array, t)  # noqa: E731  (the step donates its inputs)
    results = [
        make_train_step(task, lay, tx, 1)[0](copy(params), tx.init(params), state, batch, 0) for lay in (layout, plain)
    ]
    (p_cast, _, _, m_cast), (p_plain, _, _, m_plain) = results
    assert float(m_cast["loss"]) == float(m_plain["loss"])
    for k in params:
        np.testing.assert_array_equal(np.asarray(p_cast[k]), np.asarray(p_plain[k]), err_msg=k)
    assert ParamLayout.split(task_for(load_config(config)).build_model(nnx.Rngs(0)))[0].compute_casts == ()
