"""Shared by the training tests of every family: quiet runs, their metrics records, and the exact-resume check (a
run stopped part-way and resumed from its folder must log what the uninterrupted run logs)."""

import json
from pathlib import Path

from jax_mamba.configs import load_config
from jax_mamba.train.loop import TrainResult, train

QUIET = ["--progress=false"]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def losses(run_dir: Path) -> dict[int, float]:
    """Training loss by step (resume markers left out)."""
    return {r["step"]: r["loss"] for r in records(run_dir) if "loss" in r and "event" not in r}


def evals(run_dir: Path) -> list[float]:
    return [r["eval_loss"] for r in records(run_dir) if "eval_loss" in r]


def whole_and_resumed_runs(
    config: str, overrides: list[str], tmp_path: Path, *, steps: int, stop_after: int, every: int
) -> tuple[Path, Path, TrainResult]:
    """(whole run folder, split run folder, the split run's first part): ``config`` trained ``steps`` steps at once,
    and again stopped after ``stop_after`` steps then resumed from its saved config; both log every step, evaluate
    and save every ``every`` steps, with 2 accumulated micro-batches."""
    base = [*QUIET, f"--max_steps={steps}", "--log_every=1", f"--eval_every={every}", f"--save_every={every}"]
    base += ["--grad_accum_steps=2", *overrides]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    train(load_config(config, base), run_dir=whole, echo=lambda *_: None)
    first = train(load_config(config, [*base, f"--stop_after_steps={stop_after}"]), run_dir=parts, echo=lambda *_: None)
    train(load_config(str(parts / "config.yaml"), QUIET), resume=True, run_dir=parts, echo=lambda *_: None)
    return whole, parts, first
