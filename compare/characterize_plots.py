"""The characterization reports' figures (matplotlib, Agg): the operator breakdown of a training step as stacked
bars, one per framework (the seed paper's Fig. 1), in ms per step and in shares."""

from pathlib import Path

from compare.kernel_classes import CATEGORIES, UNCLASSIFIED


def breakdown_bars(sides: list[dict], path: Path, title: str) -> None:
    """sides: ``compare.characterize`` results (``framework``, ``categories_ms``) -> a PNG at ``path`` with two
    panels: ms per step and share of kernel time, each a stacked bar per framework, one colour per category."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    every = (*CATEGORIES, UNCLASSIFIED)  # a category keeps its colour across reports
    categories = [c for c in every if any(s["categories_ms"][c] > 0 for s in sides)]
    colours = plt.get_cmap("tab10")
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
            ax.barh(names, values, left=left, color=colours(every.index(category) % 10), label=category)
            left = [a + b for a, b in zip(left, values, strict=True)]
        ax.set_xlabel("share of kernel time (%)" if share else "kernel time per step (ms)")
    axes[1].legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
