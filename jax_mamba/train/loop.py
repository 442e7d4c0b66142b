"""The training loop: data -> jit step -> metrics, periodic eval and checkpoints, NaN guard, resume."""

import dataclasses
import json
import math
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
import yaml
from tqdm import tqdm

from jax_mamba.checkpoints import run_dir as runs
from jax_mamba.checkpoints.init_from import StartingWeights, fit_weights, read_weights
from jax_mamba.checkpoints.store import CheckpointStore
from jax_mamba.configs.loader import config_from_dict
from jax_mamba.configs.schema import RunConfig
from jax_mamba.data import Dataset
from jax_mamba.models import compute_dtype_for
from jax_mamba.processes import is_leader, wait_for_all
from jax_mamba.tasks import Task, task_for
from jax_mamba.train.distributed import GlobalBatches, broadcast_text, replicated
from jax_mamba.train.mesh_training import mesh_and_data
from jax_mamba.train.metrics import MetricsLog, plot_loss_curve
from jax_mamba.train.optim import averaged_weights, parameter_groups
from jax_mamba.train.prefetch import DevicePrefetch
from jax_mamba.train.sharding import fitted_mesh
from jax_mamba.train.step import init_training, make_eval_step, variable_shapes
from jax_mamba.train.step_clock import StepClock

# May change on resume; the architecture may not:
_RUNTIME_FIELDS = (
    "impl",
    "compute_dtype",
    "remat",
    "scan_checkpoint_every",
    "scan_backend",
    "ssd_checkpoint_every",
    "mixer_remat",
)


class TrainingDiverged(RuntimeError):
    """The loss or gradient norm became NaN/Inf; the run stopped without saving."""


@dataclass
class TrainResult:
    run_dir: Path
    step: int  # optimizer steps completed
    loss: float  # training loss of the last step
    eval: dict  # last evaluation: eval_loss and the task's metrics (bits per byte, accuracy, top-1/top-5)
    traces: int  # times the train step was traced (1: no retracing)
    items_per_s: float | None  # tokens or images (``unit``) per second, mean over the steps after the warm-up
    peak_memory_bytes: int | None
    unit: str = "tokens"


def peak_memory_bytes() -> int | None:
    stats = jax.local_devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def _check_resumable(saved: RunConfig, cfg: RunConfig, echo) -> None:
    strip = lambda m: {k: v for k, v in dataclasses.asdict(m).items() if k not in _RUNTIME_FIELDS}  # noqa: E731
    if strip(saved.model) != strip(cfg.model):
        changed = [k for k, v in strip(cfg.model).items() if strip(saved.model)[k] != v]
        raise runs.RunDirError(
            f"--resume: the model differs from the saved run's in {changed}; a checkpoint only "
            "loads into the same architecture"
        )
    for section in ("data", "train", "optim"):
        old, new = dataclasses.asdict(getattr(saved, section)), dataclasses.asdict(getattr(cfg, section))
        changed = {k: (old[k], v) for k, v in new.items() if old[k] != v and k not in ("run_dir", "stop_after_steps")}
        if changed:
            echo(
                f"note: resuming with changed {section} settings {changed}; the trajectory will differ from the "
                "uninterrupted run's"
            )


def _one_line(err: Exception, limit: int = 200) -> str:
    """An exception as one short line (orbax and TensorStore raise messages of thousands of lines)."""
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


def _restore_newest_intact(store: CheckpointStore, params, opt_state, model_state, echo) -> tuple[int, tuple]:
    """(step, (params, opt_state, model_state)) of the newest checkpoint that restores. Newer ones that do not
    (damaged files) are named in a one-line warning each and set aside, never deleted."""
    failures: list[tuple[int, str]] = []
    for step in sorted(store.steps(), reverse=True):
        try:
            params_, opt_state_, model_state_, _ = store.restore(step, params, opt_state, model_state)
        except Exception as err:  # TensorStore's errors arrive as bare Exceptions; each kind means "unreadable"
            failures.append((step, _one_line(err)))
            continue
        for bad, why in failures:
            moved = store.set_aside(bad)
            echo(f"warning: checkpoint step {bad} is damaged ({why}); kept as {moved}; resuming from step {step}")
        return step, (params_, opt_state_, model_state_)
    newest, why = failures[0]
    raise runs.RunDirError(
        f"--resume: none of the {len(failures)} checkpoints in {store.directory} restores; the newest (step "
        f"{newest}): {why}. If the config changed since it was saved (model size, or an optim setting such as "
        "grad_clip), resume with the saved config.yaml; nothing was changed on disk"
    )


def _evaluate(task: Task, eval_step, params, state, dataset: Dataset, mesh) -> dict:
    """The task's evaluation metrics from sums over the evaluation batches (scalars, or arrays such as per-class
    counts, summed elementwise in float64). Every device gets the whole batch (the same in every process)."""
    loss_sum, sums = 0.0, {}
    for batch in dataset.eval_batches():
        batch_loss, batch_sums = jax.device_get(eval_step(params, state, replicated(batch, mesh)))
        loss_sum += float(batch_loss)
        sums = {k: sums.get(k, 0.0) + np.asarray(v, np.float64) for k, v in batch_sums.items()}
    return task.eval_metrics(loss_sum, {k: float(v) if v.ndim == 0 else v for k, v in sums.items()})


def _mesh_for_devices(saved: RunConfig, cfg: RunConfig, echo) -> RunConfig:
    """``cfg`` with the saved run's mesh fitted to the devices present, where the mesh is the saved one (not
    overridden) and they cannot form it: a run saved on N devices continues on M, saying so in one line."""
    count = len(jax.devices())
    fitted = fitted_mesh(cfg.mesh, count)
    if cfg.mesh != saved.mesh or fitted == cfg.mesh:
        return cfg
    old, new = cfg.mesh, fitted
    echo(
        f"--resume: the saved mesh (data {old.data}, fsdp {old.fsdp}, context {old.context}) does not fit the {count} "
        f"device(s) present; continuing on data {new.data or count // (new.fsdp * new.context)}, fsdp {new.fsdp}, "
        f"context {new.context} (--mesh.fsdp, --mesh.data, --mesh.context choose another)"
    )
    return dataclasses.replace(cfg, mesh=fitted)


def train(cfg: RunConfig, *, resume: bool = False, run_dir: Path | None = None, echo=print) -> TrainResult:
    """Train ``cfg`` in ``run_dir`` (default: a new folder under runs/<name>/), or continue it with ``resume``. In a
    multi-process run (``train.distributed``) every process calls this with the same run folder; process 0 alone
    writes the run's files and prints."""
    run_dir = Path(run_dir) if run_dir is not None else Path(broadcast_text(str(runs.new_run_dir(cfg))))
    if not is_leader():
        echo = lambda *_: None  # noqa: E731
    if resume:
        runs.prepare_resume(run_dir)
        saved = config_from_dict(yaml.safe_load((run_dir / runs.CONFIG_FILE).read_text()))
        _check_resumable(saved, cfg, echo)
        cfg = _mesh_for_devices(saved, cfg, echo)
    starting = _check_weights(cfg, resume)
    with mesh_and_data(cfg) as (mesh, task, dataset):
        return _train(cfg, task, dataset, resume, run_dir, echo, mesh, starting)


def _check_weights(cfg: RunConfig, resume: bool) -> StartingWeights | None:
    """Before any work: the optimizer's parameter groups match parameters (ConfigError if a pattern matches none),
    and a new run's ``train.init_from`` weights, fitted to ``cfg``'s model (InitFromError if they do not fit); a
    resumed run's weights come from its own checkpoints."""
    o, t = cfg.optim, cfg.train
    if not (o.freeze or o.train_only or o.lr_scale or (t.init_from is not None and not resume)):
        return None
    task = task_for(cfg)
    params_like, state_like = variable_shapes(cfg, task)
    parameter_groups(o, list(params_like), task.head_patterns)
    if t.init_from is None or resume:
        return None
    weights = read_weights(t.init_from, cfg.family, cfg.model)
    return fit_weights(weights, params_like, state_like, t.init_from_skip, task.head_patterns)


def _write_run_info(
    cfg: RunConfig, run_dir: Path, setup, mesh, dataset: Dataset, echo, starting: StartingWeights | None = None
) -> None:
    """A new run's ``run.json`` (what ran where: parameters, devices, mesh, dtypes, versions, data, the weights it
    started from), and its lines."""
    n_params = sum(int(np.prod(p.shape)) for p in setup.params.values())
    info = {
        "config": cfg.name,
        "parameters": n_params,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "processes": jax.process_count(),
        "mesh": dict(mesh.shape),
        "compute_dtype": str(np.dtype(compute_dtype_for(cfg.model))),
        "jax": jax.__version__,
        "python": platform.python_version(),
        "data": dataset.describe(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    model = setup.layout.merge(setup.params, setup.state)
    attention = getattr(model, "attention_implementation", lambda: None)()
    if attention:  # hybrids: cuDNN flash attention or XLA's
        info["attention"] = attention
    if starting is not None:
        info["init_from"] = starting.info
        skipped = starting.info["skipped"]
        echo(
            f"weights from {starting.info['path']} ({starting.info['kind']})"
            + (f"; fresh: {', '.join(skipped)}" if skipped else "")
        )
    if is_leader():
        (run_dir / "run.json").write_text(json.dumps(info, indent=2))
    echo(
        f"{cfg.name}: {n_params / 1e6:.2f}M parameters on {jax.default_backend()} "
        f"({info['compute_dtype']} compute{f', {attention} attention' if attention else ''}), "
        f"data {dataset.describe()['kind']}, "
        + (f"mesh {dict(mesh.shape)}, " if mesh.size > 1 else "")
        + f"run folder {run_dir}"
    )


@dataclass
class _StepLog:
    """Where read steps go: the metrics file's log lines every ``log_every`` steps and at ``end``, the progress bar."""

    metrics: MetricsLog
    bar: tqdm
    log_every: int
    end: int
    rate_key: str

    def read(self, unread: list[tuple[int, dict]], clock: StepClock, checkpoint: str) -> dict:
        """Read the metrics of the steps dispatched since the last read point (waiting for the last of them), stop
        at the first NaN/Inf (``checkpoint``: where the last good one is), log the steps due and count their time.
        Returns the last step's metrics."""
        values = jax.device_get([out for _, out in unread])
        now = time.perf_counter()
        clock.read(unread[0][0], len(unread), now)
        last: dict = {}
        for (at, _), out in zip(unread, values, strict=True):
            last = {k: float(v) for k, v in out.items()}
            if not (math.isfinite(last["loss"]) and math.isfinite(last["grad_norm"])):
                self.metrics.write({"step": at, "event": "diverged", **last})
                raise TrainingDiverged(
                    f"training diverged at step {at}: loss={last['loss']}, grad_norm={last['grad_norm']}. "
                    f"Stopped without saving; the last good checkpoint is {checkpoint}. Lower optim.lr or lengthen "
                    "optim.warmup_steps, then continue with --resume."
                )
        at = unread[-1][0]
        if at % self.log_every == 0 or at == self.end:  # log steps end a read group: the window is the group's
            rate = clock.window_rate(now)
            self.metrics.write({"step": at, **last, self.rate_key: rate, "time": time.time()})
            self.bar.set_postfix(loss=f"{last['loss']:.4f}", **{self.rate_key: f"{rate:,.0f}"})
        self.bar.update(len(unread))
        return last


def _train(
    cfg: RunConfig,
    task: Task,
    dataset: Dataset,
    resume: bool,
    run_dir: Path,
    echo,
    mesh,
    starting: StartingWeights | None = None,
) -> TrainResult:
    t = cfg.train
    if not resume:  # every process checks the folder (so that all stop alike); process 0 writes
        runs.prepare_new(run_dir, cfg, write=is_leader())
    wait_for_all("run folder ready")
    setup = init_training(cfg, task, mesh, starting)
    params, model_state, opt_state, train_step = setup.params, setup.state, setup.opt_state, setup.train_step
    store = CheckpointStore(run_dir / runs.CHECKPOINT_DIR, t.keep_checkpoints)
    metrics = MetricsLog(run_dir / "metrics.jsonl", enabled=is_leader())
    start = 0
    if resume:
        start, (params, opt_state, model_state) = _restore_newest_intact(store, params, opt_state, model_state, echo)
        metrics.write({"event": "resume", "step": start, "time": time.time()})
        echo(f"resumed {run_dir} at step {start}")
    else:
        _write_run_info(cfg, run_dir, setup, mesh, dataset, echo, starting)
    eval_step = make_eval_step(task, setup.layout)
    end = t.max_steps if t.stop_after_steps is None else min(t.max_steps, start + t.stop_after_steps)
    clock = StepClock(start, end, task.items_per_batch() * t.grad_accum_steps)
    shown = t.progress and is_leader()
    bar = tqdm(total=t.max_steps, initial=start, disable=not shown, dynamic_ncols=True, mininterval=1.0)
    log = _StepLog(metrics, bar, t.log_every, end, f"{task.unit}_per_s")
    saved_step = start if resume else None
    last, eval_result, step = {"loss": float("nan")}, {}, start
    batches = GlobalBatches(dataset, mesh, t.batch_size, t.grad_accum_steps)  # this process's rows, global arrays
    prefetch = DevicePrefetch(batches, start, end)  # batches made while the device works
    try:
        # Steps are dispatched back to back and their metrics read only at read points (log, eval and save steps,
        # the end of the warm-up, the last step): a read waits for the device, and reading every step would keep
        # the host from queueing the next step while the device works on this one.
        unread: list[tuple[int, dict]] = []
        while step < end:
            asked = time.perf_counter()
            batch = prefetch.next(step)
            clock.waited_for_data(step, time.perf_counter() - asked)
            alone = clock.runs_alone(step, batch)
            if alone:
                jax.block_until_ready([out for _, out in unread])
                called = time.perf_counter()
            params, opt_state, model_state, out = train_step(params, opt_state, model_state, batch, np.int32(step))
            if alone:
                jax.block_until_ready(out)
                clock.ran_alone(time.perf_counter() - called)
            step += 1
            unread.append((step, out))
            log_due, eval_due, save_due = (step % every == 0 for every in (t.log_every, t.eval_every, t.save_every))
            if not (log_due or eval_due or save_due or step in (end, clock.timed_after)):
                continue
            checkpoint = f"step {saved_step} in {store.directory}" if saved_step is not None else "none was saved yet"
            last = log.read(unread, clock, checkpoint)  # never evaluate or save past an unread (diverged?) step
            unread = []
            if eval_due or step == end:
                eval_result = _evaluate(task, eval_step, params, model_state, dataset, mesh)
                average = averaged_weights(opt_state)
                if average is not None:  # the averaged weights with the model's own batch statistics
                    ema_result = _evaluate(task, eval_step, average, model_state, dataset, mesh)
                    eval_result |= {f"ema_{k}": v for k, v in ema_result.items()}
                metrics.write({"step": step, **eval_result})
                echo(f"step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in eval_result.items()))
            if t.save_checkpoints and (save_due or step == end) and saved_step != step:
                saved = {"step": step, "loss": last["loss"], "config": cfg.name}
                store.save(step, params, opt_state, model_state, saved)
                saved_step = step
            if eval_due or save_due:
                clock.paused()
    finally:
        prefetch.close()
        bar.close()
        store.close()
        records = metrics.read() if is_leader() else []
        if records:
            plot_loss_curve(records, run_dir / "loss_curve.png", f"{cfg.name} ({run_dir.name})")
    timing, peak = clock.summary(), peak_memory_bytes()
    items_per_s = timing.pop("items_per_s")
    metrics.write(
        {"event": "end", "step": step, f"{log.rate_key}_mean": items_per_s, **timing, "peak_memory_bytes": peak}
        | {"traces": setup.traces[0], "time": time.time()}
    )
    return TrainResult(run_dir, step, last["loss"], eval_result, setup.traces[0], items_per_s, peak, task.unit)
