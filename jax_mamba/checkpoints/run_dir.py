"""Where a run lives: ``runs/<config name>/<timestamp>/`` holding config.yaml, run.json, metrics.jsonl,
loss_curve.png and checkpoints/. A new run never writes into a folder that already holds checkpoints."""

import time
from pathlib import Path

import yaml

from jax_mamba.configs.loader import config_to_dict
from jax_mamba.configs.schema import RunConfig

RUNS_ROOT = Path("runs")
CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"


class RunDirError(RuntimeError):
    """A run folder that cannot be used as asked (nothing to resume, or a finished run in the way)."""


def has_checkpoints(run_dir: Path) -> bool:
    ckpt = run_dir / CHECKPOINT_DIR
    return ckpt.is_dir() and any(p.name.isdigit() for p in ckpt.iterdir())


def latest_run(name: str, root: Path = RUNS_ROOT) -> Path:
    """The most recent run folder of config ``name`` that holds a checkpoint."""
    candidates = sorted(p for p in (root / name).glob("*") if p.is_dir() and has_checkpoints(p))
    if not candidates:
        raise RunDirError(
            f"--resume: no run of config {name!r} with a checkpoint under {root / name}; pass --run_dir=DIR to name one"
        )
    return candidates[-1]


def new_run_dir(cfg: RunConfig, root: Path = RUNS_ROOT) -> Path:
    if cfg.train.run_dir:
        return Path(cfg.train.run_dir)
    return root / cfg.name / time.strftime("%Y%m%d-%H%M%S")


def prepare_new(run_dir: Path, cfg: RunConfig, write: bool = True) -> None:
    """Create the folder for a fresh run and record its config; refuse a folder that already holds checkpoints.
    ``write=False`` only checks (the processes of a multi-process run other than the one that writes)."""
    if has_checkpoints(run_dir):
        raise RunDirError(
            f"{run_dir} already holds checkpoints; pass --resume to continue that run, or choose "
            "another --run_dir (nothing was overwritten)"
        )
    if not write:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))


def prepare_resume(run_dir: Path) -> None:
    if not has_checkpoints(run_dir):
        raise RunDirError(f"--resume: {run_dir} holds no checkpoint to resume from")
