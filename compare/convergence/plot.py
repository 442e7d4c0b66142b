"""The picture of a ``compare.convergence`` result: the curves (one color a seed: JAX solid, mamba-ssm dashed, each
step faint under its moving average), and below them what the verdict judges: each seed's same-start difference of
trailing medians against its band, and the spikes."""

from pathlib import Path

import numpy as np

from compare.convergence.verdict import curve_name, parse_curve_name, smooth, trailing_median


def plot(path: Path, result: dict, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window, curves = result["window"], result["curves"]
    steps = np.arange(1, len(next(iter(curves.values()))) + 1)
    seeds = sorted({parse_curve_name(name)[1] for name in curves})
    colors = {s: f"C{i % 10}" for i, s in enumerate(seeds)}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), sharex=True, height_ratios=[2, 1])
    for name, losses in curves.items():
        framework, seed = parse_curve_name(name)
        style = "-" if framework == "jax" else "--"
        top.plot(steps, losses, style, color=colors[seed], alpha=0.15, linewidth=0.6)
        top.plot(steps, smooth(losses, window), style, color=colors[seed], label=name)
    finite = np.concatenate([np.asarray(c, float) for c in curves.values()])
    finite = finite[np.isfinite(finite)]
    if finite.size:  # the raw steps' spikes would flatten the curves: show up to a little above the smoothed range
        top.set_ylim(finite.min() * 0.95, np.percentile(finite, 99.5) * 1.1)
    top.set_ylabel("training loss")
    top.set_title(title)
    top.legend(fontsize=8, ncol=2)
    for s in result["verdict"]["seeds"]:
        seed = s["seed"]
        levels = (trailing_median(curves[curve_name(f, seed)], window) for f in ("jax", "torch"))
        diff = next(levels) - next(levels)
        bottom.plot(steps, diff, color=colors[seed], label=f"seed {seed}: JAX - mamba-ssm")
        if s["judged"]:
            band = np.asarray(s["band"])
            bottom.fill_between(steps, -band, band, color=colors[seed], alpha=0.12, linewidth=0)
        for event in s["spikes"]:
            marker = "^" if event["side"] == "jax" else "v"
            bottom.plot(event["first"], diff[event["first"] - 1], marker, color=colors[seed], markersize=5)
    bottom.axhline(0.0, color="grey", linewidth=0.5)
    bottom.set_xlabel("step")
    bottom.set_ylabel(f"difference ({window}-step median)")
    bottom.set_title("same start: difference, band (shaded), spikes (^ JAX, v mamba-ssm)", fontsize=9)
    bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
