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
from flax import nnx
from tqdm import tqdm

from jax_mamba.configs.loader import config_from_dict
from jax_mamba.configs.schema import RunConfig
from jax_mamba.data import DataError, Dataset, make_dataset
from jax_mamba.models import MambaLMHeadModel, ParamLayout, compute_dtype_for
from jax_mamba.train import run_dir as runs
from jax_mamba.train.checkpoint import CheckpointStore
from jax_mamba.train.metrics import MetricsLog, plot_loss_curve
from jax_mamba.train.optim import learning_rate_schedule, make_optimizer
from jax_mamba.train.step import make_eval_step, make_train_step

_RUNTIME_FIELDS = ("impl", "compute_dtype", "remat")  # may change on resume; the architecture may not


class TrainingDiverged(RuntimeError):
    """The loss or gradient norm became NaN/Inf; the run stopped without saving."""


@dataclass
class TrainResult:
    run_dir: Path
    step: int  # optimizer steps completed
    loss: float  # training loss of the last step
    eval: dict  # last evaluation: eval_loss and eval_bits_per_byte or eval_accuracy
    traces: int  # times the train step was traced (1: no retracing)
    tokens_per_s: float | None  # mean over this invocation's steps after the first (compilation)
    peak_memory_bytes: int | None


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


def _evaluate(eval_step, params, dataset: Dataset) -> dict:
    loss_sum = count = correct = 0.0
    for batch in dataset.eval_batches():
        l, c, k = jax.device_get(eval_step(params, batch))
        loss_sum, count, correct = loss_sum + float(l), count + float(c), correct + float(k)
    loss = loss_sum / max(count, 1.0)
    result = {"eval_loss": loss, "eval_perplexity": math.exp(min(loss, 700.0))}
    if dataset.metric == "bits_per_byte":
        result["eval_bits_per_byte"] = loss / math.log(2)
    else:
        result["eval_accuracy"] = correct / max(count, 1.0)
    return result


def train(cfg: RunConfig, *, resume: bool = False, run_dir: Path | None = None, echo=print) -> TrainResult:
    """Train ``cfg`` in ``run_dir`` (default: a new folder under runs/<name>/), or continue it with ``resume``."""
    t = cfg.train
    run_dir = Path(run_dir) if run_dir is not None else runs.new_run_dir(cfg)
    if resume:
        runs.prepare_resume(run_dir)
        saved = config_from_dict(yaml.safe_load((run_dir / runs.CONFIG_FILE).read_text()))
        _check_resumable(saved, cfg, echo)
    dataset = make_dataset(cfg.data, t)
    if cfg.model.vocab_size < dataset.vocab_size:
        raise DataError(
            f"model.vocab_size={cfg.model.vocab_size} is smaller than the data's vocabulary "
            f"({dataset.vocab_size} tokens)"
        )
    if not resume:
        runs.prepare_new(run_dir, cfg)

    model = MambaLMHeadModel(cfg.model, rngs=nnx.Rngs(params=t.seed))
    layout, params = ParamLayout.split(model)
    del model
    tx = make_optimizer(cfg.optim, t.max_steps, params)
    opt_state = tx.init(params)
    store = CheckpointStore(run_dir / runs.CHECKPOINT_DIR, t.keep_checkpoints)
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    start = 0
    if resume:
        start = store.latest_step()
        try:
            params, opt_state, _ = store.restore(start, params, opt_state)
        except ValueError as err:
            raise runs.RunDirError(
                f"--resume: checkpoint {start} in {store.directory} does not fit this run's model "
                f"and optimizer (was an optim setting such as grad_clip switched?): {err}"
            ) from err
        metrics.write({"event": "resume", "step": start, "time": time.time()})
        echo(f"resumed {run_dir} at step {start}")
    else:
        n_params = sum(int(np.prod(p.shape)) for p in params.values())
        info = {
            "config": cfg.name,
            "parameters": n_params,
            "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "compute_dtype": str(np.dtype(compute_dtype_for(cfg.model))),
            "jax": jax.__version__,
            "python": platform.python_version(),
            "data": dataset.describe(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        (run_dir / "run.json").write_text(json.dumps(info, indent=2))
        echo(
            f"{cfg.name}: {n_params / 1e6:.2f}M parameters on {jax.default_backend()} "
            f"({info['compute_dtype']} compute), data {dataset.describe()['kind']}, run folder {run_dir}"
        )

    train_step, traces = make_train_step(layout, tx, t.grad_accum_steps)
    eval_step = make_eval_step(layout)
    schedule = learning_rate_schedule(cfg.optim, t.max_steps)
    end = t.max_steps if t.stop_after_steps is None else min(t.max_steps, start + t.stop_after_steps)
    tokens_per_step = t.batch_size * t.seq_len * t.grad_accum_steps
    saved_step = start if resume else None
    last = {"loss": float("nan")}
    eval_result: dict = {}
    timed_steps, timed_seconds = 0, 0.0
    window_start, window_steps = time.perf_counter(), 0
    step = start
    bar = tqdm(total=t.max_steps, initial=start, disable=not t.progress, dynamic_ncols=True, mininterval=1.0)

    def save(at: int) -> None:
        nonlocal saved_step
        if saved_step != at:
            store.save(at, params, opt_state, {"step": at, "loss": last["loss"], "config": cfg.name})
            saved_step = at

    try:
        batch = jax.device_put(dataset.train_batch(start, t.grad_accum_steps)) if start < end else None
        while step < end:
            began = time.perf_counter()
            params, opt_state, out = train_step(params, opt_state, batch)
            if step + 1 < end:  # prepare the next batch while the device works
                batch = jax.device_put(dataset.train_batch(step + 1, t.grad_accum_steps))
            last = {k: float(v) for k, v in jax.device_get(out).items()}
            step += 1
            if not (math.isfinite(last["loss"]) and math.isfinite(last["grad_norm"])):
                metrics.write({"step": step, "event": "diverged", **last})
                where = f"step {saved_step} in {store.directory}" if saved_step is not None else "none was saved yet"
                raise TrainingDiverged(
                    f"training diverged at step {step}: loss={last['loss']}, grad_norm={last['grad_norm']}. "
                    f"Stopped without saving; the last good checkpoint is {where}. Lower optim.lr or lengthen "
                    "optim.warmup_steps, then continue with --resume."
                )
            elapsed = time.perf_counter() - began
            if step > start + 1:  # the first step of an invocation includes compilation
                timed_steps, timed_seconds = timed_steps + 1, timed_seconds + elapsed
            window_steps += 1
            bar.update(1)
            if step % t.log_every == 0 or step == end:
                now = time.perf_counter()
                tok_s = tokens_per_step * window_steps / max(now - window_start, 1e-9)
                window_start, window_steps = now, 0
                record = {
                    "step": step,
                    "loss": last["loss"],
                    "grad_norm": last["grad_norm"],
                    "lr": float(schedule(step - 1)),
                    "tokens_per_s": tok_s,
                    "time": time.time(),
                }
                if dataset.metric == "accuracy":
                    record["accuracy"] = last["accuracy"]
                metrics.write(record)
                bar.set_postfix(loss=f"{last['loss']:.4f}", tok_s=f"{tok_s:,.0f}")
            if step % t.eval_every == 0 or step == end:
                eval_result = _evaluate(eval_step, params, dataset)
                metrics.write({"step": step, **eval_result})
                echo(f"step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in eval_result.items()))
            if step % t.save_every == 0 or step == end:
                save(step)
    finally:
        bar.close()
        store.close()
        records = metrics.read()
        if records:
            plot_loss_curve(records, run_dir / "loss_curve.png", f"{cfg.name} ({run_dir.name})")

    tokens_per_s = tokens_per_step * timed_steps / timed_seconds if timed_steps else None
    peak = peak_memory_bytes()
    metrics.write(
        {
            "event": "end",
            "step": step,
            "tokens_per_s_mean": tokens_per_s,
            "peak_memory_bytes": peak,
            "traces": traces[0],
            "time": time.time(),
        }
    )
    return TrainResult(run_dir, step, last["loss"], eval_result, traces[0], tokens_per_s, peak)
