"""Whether training curves of two frameworks agree: each JAX seed against the mamba-ssm run from the same start.

Curves are keyed ``(framework, seed)`` with framework ``"jax"`` or ``"torch"``; a JAX seed is judged when the
reference ran from the same seed (the same initial weights and batches). Levels are judged on trailing medians over
``window`` steps (``trailing_median``: an excursion shorter than half the window leaves them alone, so one spike
cannot pass for a plateau); spikes are judged step by step.

For JAX seed s:

- **The band**: how far two healthy runs from different starts drift apart, from the runs other than JAX seed s
  itself: the largest |difference| between the median curves of two seeds of mamba-ssm, or of two other seeds of
  ours (at each step, and its mean over the second half). Where neither framework has two such seeds (a file of one
  mamba-ssm seed and two JAX seeds), pairs of distinct seeds across the frameworks stand in. JAX seed s's own curve
  never widens its band, so a seed that breaks away cannot excuse itself.
- **Break-away**: the same-start pair's median curves differ by more than the band for ``breakaway_steps`` in a
  row (two windows, and a tenth of the run: a plateau or a lasting gap on either side), or by more than the band on
  average over the second half.
- **Spike**: a step whose loss is at least ``SPIKE_RATIO`` times the other framework's loss on the same batch from the
  same start (which one spiked is recorded). A spike that recovers is flagged, not failed.

The JAX seeds with a reference run from their start are judged (others only widen the bands of the rest). The
curves agree when at least one seed is judged, no NaN or Inf appears, and no judged seed breaks away.
"""

import re
from itertools import combinations

import numpy as np

FRAMEWORK_NAMES = {"jax": "JAX", "torch": "mamba-ssm"}


def curve_name(framework: str, seed: int) -> str:
    """How a result names the curve of (framework, seed): "JAX seed 0", "mamba-ssm seed 0"."""
    return f"{FRAMEWORK_NAMES[framework]} seed {seed}"


def parse_curve_name(name: str) -> tuple[str, int]:
    match = re.fullmatch(r"(JAX|mamba-ssm) seed (\d+)", name)
    if not match:
        raise ValueError(f"curve name {name!r}: expected 'JAX seed N' or 'mamba-ssm seed N'")
    return {v: k for k, v in FRAMEWORK_NAMES.items()}[match[1]], int(match[2])


SPIKE_RATIO = 1.5  # a step's loss over the other framework's on the same batch, from the same start
MIN_SEEDS = 3  # seeds per framework a run of compare.convergence makes


def smooth(losses, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` steps (the first points average what exists so far)."""
    values = np.asarray(losses, np.float64)
    sums = np.concatenate([[0.0], np.cumsum(values)])
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def breakaway_steps(steps: int, window: int) -> int:
    """How long a gap beyond the band must last to count as a break-away: two windows, and a tenth of the run (the
    median curves of healthy runs cross each other's bands for a window or so at a time: seen in runs of 200 steps)."""
    return max(2 * window, steps // 10)


def trailing_median(losses, window: int) -> np.ndarray:
    """Median of each step's last ``window`` losses (the first points take what exists so far)."""
    values = np.asarray(losses, np.float64)
    padded = np.concatenate([np.full(window - 1, np.nan), values])
    with np.errstate(all="ignore"):
        return np.nanmedian(np.lib.stride_tricks.sliding_window_view(padded, window), axis=1)


def _stretches(mask: np.ndarray) -> list[tuple[int, int]]:
    """[(first, last)] 0-based index ranges where ``mask`` holds."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def spikes(jax_curve: np.ndarray, reference: np.ndarray) -> list[dict]:
    """Steps (1-based, runs of consecutive steps merged) where one side's loss is at least ``SPIKE_RATIO`` times the
    other's: {"side": "jax"/"torch", "first", "last", "loss", "reference_loss"} at the step of the largest ratio."""
    events = []
    for side, high, low in (("jax", jax_curve, reference), ("torch", reference, jax_curve)):
        for first, last in _stretches(high >= SPIKE_RATIO * low):
            peak = first + int(np.argmax(high[first : last + 1] / low[first : last + 1]))
            events.append({"side": side, "first": first + 1, "last": last + 1,
                           "loss": float(high[peak]), "other_loss": float(low[peak])})  # fmt: skip
    return sorted(events, key=lambda e: e["first"])


def _band(levels: dict, seed: int, half: int) -> tuple[np.ndarray, float, str] | None:
    """(band at each step, band over the second half, what it was drawn from) for JAX seed ``seed``."""
    others = {key: curve for key, curve in levels.items() if key != ("jax", seed)}
    within = [(a, b) for a, b in combinations(others, 2) if a[0] == b[0]]
    source = "seed pairs within each framework"
    if not within:
        within = [(a, b) for a, b in combinations(others, 2) if a[1] != b[1]]
        source = "distinct seeds across the frameworks (no framework had two other seeds)"
    if not within:
        return None
    gaps = np.stack([np.abs(others[a] - others[b]) for a, b in within])
    return gaps.max(axis=0), float(gaps[:, half:].mean(axis=1).max()), source


def spread(levels: dict, framework: str, half: int) -> float | None:
    """The largest second-half mean |difference| between two seeds of one framework (None under two seeds)."""
    keys = [k for k in levels if k[0] == framework]
    gaps = [float(np.mean(np.abs(levels[a][half:] - levels[b][half:]))) for a, b in combinations(keys, 2)]
    return max(gaps) if gaps else None


def judge_seed(levels: dict, raw: dict, seed: int, window: int) -> dict:
    """The verdict on JAX seed ``seed`` against the reference run from its start (see the module docstring)."""
    jax_curve, reference = raw[("jax", seed)], raw[("torch", seed)]
    half = len(jax_curve) // 2
    signed = levels[("jax", seed)] - levels[("torch", seed)]
    gap = np.abs(signed)
    result = {
        "seed": seed,
        "first_step_difference": float(abs(jax_curve[0] - reference[0])),
        "final_jax": float(np.mean(jax_curve[-window:])),
        "final_torch": float(np.mean(reference[-window:])),
        "late_gap": float(gap[half:].mean()),
        "spikes": spikes(jax_curve, reference),
    }
    band = _band(levels, seed, half)
    if band is None:
        return {**result, "judged": False, "agree": False, "reason": "no other runs to draw a band from"}
    band_steps, band_late, source = band
    breakaways = [
        {
            "first": first + 1,
            "last": last + 1,
            "higher": "jax" if signed[first : last + 1].mean() > 0 else "torch",
            "largest_gap": float(gap[first : last + 1].max()),
        }
        for first, last in _stretches(gap > band_steps)
        if last - first + 1 >= breakaway_steps(len(jax_curve), window)
    ]
    reasons = [
        f"steps {b['first']}-{b['last']}: {b['higher']} higher, gap up to {b['largest_gap']:.3f} beyond the band"
        for b in breakaways
    ]
    if result["late_gap"] > band_late:
        reasons.append(f"second half: mean gap {result['late_gap']:.4f} > band {band_late:.4f}")
    return {
        **result,
        "judged": True,
        "band_late": band_late,
        "band_source": source,
        "band": band_steps.tolist(),
        "breakaways": breakaways,
        "agree": not reasons,
        "reason": "; ".join(reasons) or "within the band",
    }


def verdict(curves: dict[tuple[str, int], list[float]], window: int) -> dict:
    """The verdict on all JAX seeds of ``curves`` ({(framework, seed): per-step losses}, one length)."""
    lengths = {len(c) for c in curves.values()}
    if len(lengths) != 1 or min(lengths) < 2:
        raise ValueError(f"curves must all have the same length >= 2, got lengths {sorted(lengths)}")
    raw = {k: np.asarray(v, np.float64) for k, v in curves.items()}
    paired = sorted(s for f, s in raw if f == "jax" and ("torch", s) in raw)
    not_finite = [f"{f} seed {s}" for (f, s), c in raw.items() if not np.all(np.isfinite(c))]
    if not_finite or not paired:
        reason = f"NaN or Inf in {', '.join(not_finite)}" if not_finite else "no JAX seed has a reference run"
        return {"agree": False, "reason": reason, "seeds": [], "spread": {}}
    levels = {k: trailing_median(v, window) for k, v in raw.items()}
    half = len(next(iter(raw.values()))) // 2
    seeds = [judge_seed(levels, raw, s, window) for s in paired]
    failing = [s for s in seeds if not s["agree"]]
    return {
        "agree": not failing,
        "reason": "; ".join(f"JAX seed {s['seed']}: {s['reason']}" for s in failing) or "every seed within its band",
        "seeds": seeds,
        "spread": {framework: spread(levels, framework, half) for framework in ("jax", "torch")},
    }
