"""Metrics: one JSON object per line in ``metrics.jsonl`` (append-only, so a resumed run continues the file), and
the loss-curve PNG drawn from it."""

import json
import math
from pathlib import Path

ACCURACY_KEYS = ("eval_accuracy", "eval_top1", "eval_top5")


class MetricsLog:
    """metrics.jsonl: one JSON record per line, appended; ``enabled=False`` (processes other than a multi-process
    run's first) writes nothing."""

    def __init__(self, path: Path, enabled: bool = True):
        self.path, self.enabled = Path(path), enabled

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def training_losses(run_dir: Path) -> dict[int, float]:
    """{step: training loss} from a run folder's metrics.jsonl: evaluation and other event records left out, a step
    a resumed run logged again at its later value, and a non-finite loss (written as null) as NaN."""
    records = MetricsLog(Path(run_dir) / "metrics.jsonl").read()
    return {
        r["step"]: math.nan if r["loss"] is None else r["loss"] for r in records if "loss" in r and "event" not in r
    }


def _last_per_step(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """Values of ``key`` by step; where a resumed run logged a step again, its later value wins."""
    by_step = {r["step"]: r[key] for r in records if r.get(key) is not None and "step" in r}
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def plot_loss_curve(records: list[dict], path: Path, title: str) -> None:
    """Train and eval loss against step (plus eval accuracy: synthetic tasks, top-1/top-5 for images) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    accuracies = [k for k in ACCURACY_KEYS if any(r.get(k) is not None for r in records)]
    has_accuracy = bool(accuracies)
    fig, axes = plt.subplots(1, 2 if has_accuracy else 1, figsize=(11 if has_accuracy else 6.5, 4), squeeze=False)
    ax = axes[0, 0]
    for key, label in (("loss", "train"), ("eval_loss", "eval")):
        steps, values = _last_per_step(records, key)
        if steps:
            ax.plot(steps, values, marker="o" if key == "eval_loss" else None, ms=3, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    for key in accuracies:
        steps, values = _last_per_step(records, key)
        axes[0, 1].plot(steps, values, marker="o", ms=3, label=key.removeprefix("eval_"))
    if has_accuracy:
        axes[0, 1].set_xlabel("step")
        axes[0, 1].set_ylabel("eval accuracy")
        axes[0, 1].set_ylim(0, 1.02)
        axes[0, 1].grid(alpha=0.3)
        axes[0, 1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
