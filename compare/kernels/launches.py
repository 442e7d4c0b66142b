"""Per-kernel GPU time of a JAX call from the profiler: which kernel of a pass the time goes to.

``traced_launches(fn)`` runs ``fn`` a few times under ``jax.profiler.trace`` and lists each device launch from the
trace (XPlane); ``kernel_totals(launches_us_by_op(launches, calls))`` sums each kernel's duration per call, e.g.
{"ssd_bwd": 1034.2, "ssd_fwd_out": 142.0, ...} in microseconds. Pallas kernels carry their ``pallas_call`` name;
XLA's own kernels their fusion names. ``launch_gaps`` says from the same launches how long the GPU sat idle between
the calls' kernels, and before which kernel: where a wall time exceeds the kernels' sum.
"""

import collections
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import jax

DEVICE_PLANE_PREFIX = "/device:GPU"


HLO_OP_STAT = "hlo_op"  # the statistic by which XLA's GPU trace names the HLO instruction that launched a kernel
NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="


def name_every_launch() -> None:
    """Turn XLA's command buffers (CUDA graphs) off for this process and those it starts; call before JAX's backend
    starts. Inside a command buffer a kernel's trace event names the buffer (``command_buffer_1``), not the HLO
    instruction that launched it, so cuBLAS GEMMs could not be told forward from backward."""
    flags = os.environ.get("XLA_FLAGS", "")
    if NO_COMMAND_BUFFERS not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {NO_COMMAND_BUFFERS}".strip()


def environment_as_trained() -> dict[str, str]:
    """This process's environment with ``name_every_launch``'s flag taken out of XLA_FLAGS: a process started with it
    runs XLA's command buffers as the training loop does."""
    env = dict(os.environ)
    flags = " ".join(f for f in env.get("XLA_FLAGS", "").split() if f != NO_COMMAND_BUFFERS)
    if flags:
        env["XLA_FLAGS"] = flags
    else:
        env.pop("XLA_FLAGS", None)
    return env


def per_call_us(profile, calls: int, plane_prefix: str = DEVICE_PLANE_PREFIX) -> dict[str, float]:
    """Sum of each event's duration over the device planes of a ``jax.profiler.ProfileData``, per call, in us,
    largest first."""
    return kernel_totals(per_call_us_by_op(profile, calls, plane_prefix))


def timed_device_events(profile, plane_prefix: str = DEVICE_PLANE_PREFIX):
    """(kernel name, launching HLO instruction with '.' as '_' or "", start in ns, duration in ns) of every event on
    the device planes of a ``jax.profiler.ProfileData``."""
    for plane in profile.planes:
        if not plane.name.startswith(plane_prefix):
            continue
        for line in plane.lines:
            for event in line.events:
                yield launch(event)


def launch(event) -> tuple[str, str, int, int]:
    """One trace event as (kernel name, launching HLO instruction with '.' as '_' or "", start in ns, duration in
    ns)."""
    op = next((str(v) for k, v in event.stats if k == HLO_OP_STAT), "")
    return event.name, op.replace(".", "_"), int(event.start_ns), int(event.duration_ns)


def device_events(profile, plane_prefix: str = DEVICE_PLANE_PREFIX):
    """(kernel name, launching HLO instruction with '.' as '_' or "", duration in ns) of every device event."""
    for name, op, _, duration_ns in timed_device_events(profile, plane_prefix):
        yield name, op, duration_ns


def per_call_us_by_op(profile, calls: int, plane_prefix: str = DEVICE_PLANE_PREFIX) -> dict[tuple[str, str], float]:
    """Like :func:`per_call_us`, keyed by (kernel, launching HLO instruction with '.' as '_', "" where the event does
    not say): library kernels (cuBLAS's ``nvjet_*``) share one name across forward and backward GEMMs, and only
    the instruction tells them apart."""
    return launches_us_by_op(timed_device_events(profile, plane_prefix), calls)


def launches_us_by_op(launches, calls: int) -> dict[tuple[str, str], float]:
    """{(kernel, instruction): us per call} of (kernel, instruction, start ns, duration ns) launches, largest first."""
    total: dict[tuple[str, str], float] = collections.defaultdict(float)
    for name, op, _, duration_ns in launches:
        total[name, op] += duration_ns / 1e3 / calls
    return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def launches_per_call(profile, calls: int, plane_prefix: str = DEVICE_PLANE_PREFIX) -> dict[str, float]:
    """kernel -> launches per call (what a counter profiler must replay to see every launch of one call)."""
    count: dict[str, float] = collections.defaultdict(float)
    for name, _, _ in device_events(profile, plane_prefix):
        count[name] += 1 / calls
    return dict(count)


def kernel_totals(launches_us: dict[tuple[str, str], float]) -> dict[str, float]:
    """{(kernel, instruction): us} -> {kernel: us}, summed over the launching instructions, largest first."""
    total: dict[str, float] = collections.defaultdict(float)
    for (kernel, _), us in launches_us.items():
        total[kernel] += us
    return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def busy_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals, in their unit."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def launch_gaps(launches: list[tuple[str, str, int, int]], calls: int) -> dict:
    """Where the GPU sat idle in a trace of ``calls`` back-to-back calls, per call, in us: ``span`` (first launch's
    start to last launch's end), ``kernels`` (durations summed), ``busy`` (their union), and ``idle_before``
    {kernel: idle time between the GPU's last busy moment and that kernel's start}, largest first.

    ``launches``: (kernel, instruction, start ns, duration ns) as :func:`timed_device_events` yields them."""
    if not launches:
        return {"span": 0.0, "kernels": 0.0, "busy": 0.0, "idle_before": {}}
    ordered = sorted(launches, key=lambda e: e[2])
    idle: dict[str, float] = collections.defaultdict(float)
    reach = ordered[0][2]
    for name, _, start, duration in ordered:
        if start > reach:
            idle[name] += (start - reach) / 1e3 / calls
        reach = max(reach, start + duration)
    return {
        "span": (reach - ordered[0][2]) / 1e3 / calls,
        "kernels": sum(e[3] for e in ordered) / 1e3 / calls,
        "busy": busy_ns([(s, s + d) for _, _, s, d in ordered]) / 1e3 / calls,
        "idle_before": dict(sorted(idle.items(), key=lambda kv: -kv[1])),
    }


def traced_launches(fn: Callable[[], object], calls: int = 5, warm_up: bool = True) -> list[tuple[str, str, int, int]]:
    """(kernel, instruction, start ns, duration ns) of every device launch of ``calls`` back-to-back calls of ``fn``
    under the profiler, after one warm-up call unless ``warm_up`` is False (the caller has run it already)."""
    if warm_up:
        jax.block_until_ready(fn())
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            for _ in range(calls):
                out = fn()
            jax.block_until_ready(out)
        (path,) = sorted(Path(trace_dir).rglob("*.xplane.pb"))[-1:]
        return list(timed_device_events(jax.profiler.ProfileData.from_file(str(path))))
