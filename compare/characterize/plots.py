"""The characterization reports' figures (matplotlib, Agg): the operator breakdown of a training step as stacked
bars, one per framework (the seed paper's Fig. 1), in ms per step and in shares; with Nsight Compute counters, a
roofline of the profiled kernels (Fig. 2) and a histogram of their DRAM bandwidth utilization, weighted by time."""

from pathlib import Path

from compare.characterize.kernel_classes import CATEGORIES, UNCLASSIFIED


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colour(category: str):
    every = (*CATEGORIES, UNCLASSIFIED)  # a category keeps its colour across reports and figures
    return _pyplot().get_cmap("tab10")(every.index(category) % 10)


def breakdown_bars(sides: list[dict], path: Path, title: str) -> None:
    """sides: ``compare.characterize`` results (``framework``, ``categories_ms``) -> a PNG at ``path`` with two
    panels: ms per step and share of kernel time, each a stacked bar per framework, one colour per category."""
    plt = _pyplot()
    every = (*CATEGORIES, UNCLASSIFIED)
    categories = [c for c in every if any(s["categories_ms"][c] > 0 for s in sides)]
    names = [s["framework"] for s in sides]
    fig, axes = plt.subplots(1, 2, figsize=(11, 1.2 + 0.9 * len(sides)), constrained_layout=True)
    for ax, share in zip(axes, (False, True), strict=True):
        left = [0.0] * len(sides)
        for category in categories:
            values = []
            for side in sides:
                ms = side["categories_ms"][category]
                total = sum(side["categories_ms"].values())
                values.append(100 * ms / total if share and total else ms)
            ax.barh(names, values, left=left, color=_colour(category), label=category)
            left = [a + b for a, b in zip(left, values, strict=True)]
        ax.set_xlabel("share of kernel time (%)" if share else "kernel time per step (ms)")
    axes[1].legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


MARKERS = {"jax": "o", "torch": "^"}


def roofline(sides: list[dict], ceilings: dict, path: Path, title: str) -> None:
    """Each profiled kernel (``side["counters"]["kernels"]``) as a point: arithmetic intensity (FLOPs per DRAM
    byte) against achieved TFLOP/s, marker size by time per step, colour by category, marker by framework; the
    measured copy ceiling as the sloped line, the measured bf16 matmul rate and the FP32 vector peak as flat ones."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5), constrained_layout=True)
    points = [(s["framework"], k) for s in sides for k in (s.get("counters") or {}).get("kernels", [])]
    points = [(f, k) for f, k in points if k["arithmetic_intensity"] and k["tflops"] > 0]
    intensities = [k["arithmetic_intensity"] for _, k in points] or [1.0]
    x = np.logspace(np.log10(min(min(intensities) / 3, 0.05)), np.log10(max(max(intensities) * 3, 2000)), 200)
    copy_tflops = ceilings["copy_gbs"] * 1e9 * x / 1e12
    ax.plot(
        x,
        np.minimum(copy_tflops, ceilings["matmul_tflops"]),
        "k-",
        lw=1.2,
        label=f"copy {ceilings['copy_gbs']:.0f} GB/s, bf16 matmul {ceilings['matmul_tflops']:.0f} TFLOP/s",
    )
    if ceilings.get("vector_tflops"):
        ax.plot(
            x,
            np.minimum(copy_tflops, ceilings["vector_tflops"]),
            "k--",
            lw=0.8,
            label=f"FP32 vector peak {ceilings['vector_tflops']:.0f} TFLOP/s",
        )
    largest = max((k["us"] for _, k in points), default=1.0)
    seen = set()
    for framework, k in points:
        label = None
        if (framework, k["category"]) not in seen:
            seen.add((framework, k["category"]))
            label = f"{framework}: {k['category']}"
        ax.scatter(
            k["arithmetic_intensity"],
            k["tflops"],
            s=20 + 300 * k["us"] / largest,
            marker=MARKERS.get(framework, "s"),
            color=_colour(k["category"]),
            alpha=0.75,
            edgecolors="k",
            linewidths=0.4,
            label=label,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def bandwidth_histogram(sides: list[dict], path: Path, title: str) -> None:
    """Per framework, the profiled kernels' DRAM bandwidth as a share of the measured copy ceiling, binned by 10%,
    each kernel weighted by its time per step (so the bars show where the step's time sits)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4), constrained_layout=True)
    bins = list(range(0, 130, 10))
    data, weights, labels = [], [], []
    for side in sides:
        kernels = [k for k in (side.get("counters") or {}).get("kernels", []) if "dram_pct_of_copy" in k]
        if not kernels:
            continue
        total = sum(k["us"] for k in kernels)
        data.append([min(k["dram_pct_of_copy"], 125.0) for k in kernels])
        weights.append([100 * k["us"] / total for k in kernels])
        labels.append(side["framework"])
    ax.hist(data, bins=bins, weights=weights, label=labels)
    ax.set_xlabel("DRAM bandwidth, % of the copy ceiling measured in the run")
    ax.set_ylabel("% of the profiled kernels' time")
    ax.legend()
    ax.set_title(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
