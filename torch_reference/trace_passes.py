"""Which pass of a training step each GPU kernel of a PyTorch profiler trace ran in (no torch import: it reads the
trace file, so recorded traces test it anywhere).

The runner wraps each pass in a ``record_function`` range named ``PASS_RANGE`` + forward / backward / optimizer and,
while profiled, synchronizes the GPU at the end of each range. So every kernel launched in a range also starts and
ends on the GPU within it, whichever thread launched it (the autograd engine launches the backward from its own
thread), and a kernel is credited by its GPU start time. Kernels outside every range go to "other"."""

import bisect
import collections

PASS_RANGE = "pass:"  # prefix of the profiler ranges around a training step's passes
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # chrome-trace categories of GPU work


def is_pass_range(event: dict) -> bool:
    """A CPU-side ``record_function`` range around one pass."""
    return event.get("cat") == "user_annotation" and event.get("name", "").startswith(PASS_RANGE)


def pass_ranges(events: list[dict]) -> list[tuple[float, float, str]]:
    """(start us, end us, pass) of the CPU-side pass ranges, by start."""
    return sorted((e["ts"], e["ts"] + e["dur"], e["name"][len(PASS_RANGE) :]) for e in events if is_pass_range(e))


def kernels_by_pass(trace: dict, steps: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """A chrome trace (``torch.profiler``'s ``export_chrome_trace``) of ``steps`` steps -> ({pass: {kernel: device
    us per step}}, {kernel: launches per step})."""
    events = trace["traceEvents"]
    ranges = pass_ranges(events)
    starts = [begin for begin, _, _ in ranges]
    us: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    launches: dict[str, float] = collections.defaultdict(float)
    for event in events:
        if event.get("cat") not in DEVICE_CATEGORIES or event.get("ph") != "X":
            continue
        at = bisect.bisect_right(starts, event["ts"]) - 1
        phase = ranges[at][2] if at >= 0 and event["ts"] <= ranges[at][1] else "other"
        us[phase][event["name"]] += event["dur"] / steps
        launches[event["name"]] += 1 / steps
    return {phase: dict(kernels) for phase, kernels in us.items()}, dict(launches)


def trimmed(trace: dict) -> dict:
    """Only what ``kernels_by_pass`` reads (GPU work and the pass ranges; name, category, phase, start, duration):
    a trace small enough to keep as a test fixture."""
    keep = ("name", "cat", "ph", "ts", "dur")
    events = [
        {k: e[k] for k in keep if k in e}
        for e in trace["traceEvents"]
        if e.get("cat") in DEVICE_CATEGORIES or is_pass_range(e)
    ]
    return {"traceEvents": events}
