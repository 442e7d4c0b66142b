"""Where a multi-device train step's time goes, per device: ``python -m compare.scaling.mesh_profile --config NAME
--mesh.data=2 --batch_size=8 [--steps N] [--out PATH] [--key=value ...]``.

Builds the run's mesh and train step as training does (``init_training``), runs ``--steps`` batches to warm up, once
timed by wall clock and once under ``jax.profiler.trace``, then reads each device's kernel timeline from the trace:

- ``compute_ms``: the union of the device's non-collective kernels (what it spends computing, overlaps counted once);
- ``collective_ms``: the summed duration of its NCCL kernels (all-reduce, all-gather, reduce-scatter, all-to-all,
  send/recv), split by kind;
- ``exposed_collective_ms``: collective time during which no compute kernel runs on that device: what overlap with
  compute failed to hide, the part of a scaling loss that communication explains;
- ``idle_ms``: step wall time minus the union of all its kernels (launch gaps, host work, waits);
- ``gap_ms``: the part of that idle time inside the traced span (between the first and the last kernel), and
  ``largest_gaps_ms`` where it falls: summed by the op scope group of the kernel that ends before each gap and of the
  one that starts after it, so a wait of the GPU on the host (or on another device) shows where in the step it is;
- ``compute_ms_by_class`` / ``_by_scope`` / ``_by_kernel``: its compute time by operator class, by op name scope
  (layer numbers folded) and by kernel, so that two meshes' steps can be diffed (kernel names are numbered per
  compilation; classes and scopes are not).

Kernels that XLA launches inside a command buffer (CUDA graph) name the buffer, not their HLO instruction, so they
have no scope; ``--name_launches`` turns command buffers off in the process (every launch named, scopes complete,
at the cost of the launches the buffers saved: compare its wall time only with another such run). Its idle time
then includes the host's launches where kernels are shorter than them: a 2-GPU Mamba-1 790m step on H100s had
17.9 ms of gaps, 10.4 at the step's start and 3.6 in the optimizer, where the same step with command buffers kept
two steps queued ahead of the GPUs (``benchmarks/README.md, multi-GPU scaling``).

All per step, in ms. Prints a table, writes ``<out>.json`` / ``<out>.md`` with ``--out`` and the raw trace with
``--keep_trace``. Needs GPUs for device timelines (on the CPU the trace has none and only the wall time is
reported)."""

import argparse
import collections
import itertools
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import jax

from compare.characterize.kernel_classes import classify
from compare.characterize.step_profile import profile_steps
from compare.kernels.launches import DEVICE_PLANE_PREFIX, launch, name_every_launch
from compare.outputs import output_path
from jax_mamba.configs.loader import ConfigError, load_config, parse_args_with_overrides
from jax_mamba.train.mesh_training import mesh_training

# collective kind -> pattern over the kernel name or its launching HLO instruction (NCCL kernels are named like
# ncclDevKernel_AllReduce_Sum_f32_RING_LL; XLA's instructions like all-reduce-start.3)
COLLECTIVE_KINDS = (
    ("all-reduce", re.compile(r"all.?reduce", re.I)),
    ("all-gather", re.compile(r"all.?gather", re.I)),
    ("reduce-scatter", re.compile(r"reduce.?scatter", re.I)),
    ("all-to-all", re.compile(r"all.?to.?all", re.I)),
    ("send/recv", re.compile(r"send|recv|collective.?permute|sendrecv", re.I)),
)


TOP_KERNELS = 60  # compute kernels and scope groups listed per device, largest first
TOP_GAPS = 8  # idle-gap places listed per device


def collective_kind(kernel: str, op: str) -> str | None:
    """The collective a device event belongs to (``COLLECTIVE_KINDS``), "other collective" for an NCCL kernel of
    none of them, None for a compute kernel or copy."""
    if "nccl" not in kernel.lower():
        return None
    for text in (kernel, op):
        kind = next((kind for kind, pattern in COLLECTIVE_KINDS if pattern.search(text)), None)
        if kind is not None:
            return kind
    return "other collective"


def union_ns(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged (start, end) intervals covering the same time as ``intervals``."""
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def covered_ns(intervals: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in intervals)


def uncovered_ns(intervals: list[tuple[int, int]], cover: list[tuple[int, int]]) -> int:
    """Time of ``intervals`` (merged) outside ``cover`` (merged): e.g. collectives while no compute runs."""
    total, j = 0, 0
    for start, end in intervals:
        inside = 0
        while j < len(cover) and cover[j][1] <= start:
            j += 1
        k = j
        while k < len(cover) and cover[k][0] < end:
            inside += min(end, cover[k][1]) - max(start, cover[k][0])
            k += 1
        total += end - start - inside
    return total


_NUMBERED = re.compile(r"_\d+(?=/|\)|$)")


def scope_group(scope: str) -> str:
    """An op name scope with its numbered parts (``layers_17``, ``dot_general_3``) as ``_*``: the same op of every
    layer, and of two differently numbered compilations, falls in one group."""
    return _NUMBERED.sub("_*", scope.removeprefix("jit(step)/"))


def idle_gaps(
    events: list[tuple[str, str, int, int]], busy: list[tuple[int, int]], place: Callable[[str, str], str]
) -> dict[tuple[str, str], int]:
    """Idle time between the merged ``busy`` intervals of ``events`` (kernel, HLO instruction, start ns, duration
    ns), summed by (place of the kernel that ends last before the gap, place of the first kernel after it), where
    ``place(kernel, instruction)`` names an event's place in the step (its scope group)."""
    ends = sorted((start + duration, place(kernel, op)) for kernel, op, start, duration in events)
    starts = sorted((start, place(kernel, op)) for kernel, op, start, _ in events)
    gaps: dict[tuple[str, str], int] = collections.defaultdict(int)
    i = j = 0
    for (_, end), (start, _) in itertools.pairwise(busy):
        while i + 1 < len(ends) and ends[i + 1][0] <= end:
            i += 1
        while starts[j][0] < start:
            j += 1
        gaps[ends[i][1], starts[j][1]] += start - end
    return gaps


def device_breakdown(
    events: list[tuple[str, str, int, int]], steps: int, wall_ms: float, scopes: dict[str, str] | None = None
) -> dict:
    """One device's (kernel, launching HLO instruction, start ns, duration ns) events over ``steps`` steps -> its
    per-step breakdown (ms; see the module docstring), its largest collectives and its compute time by kernel, by
    operator class (``kernel_classes``) and by op name scope (``scopes``: HLO instruction or kernel -> scope)."""
    scopes = scopes or {}
    compute, collective = [], []
    by_kind: dict[str, float] = collections.defaultdict(float)
    by_launch: dict[tuple[str, str], float] = collections.defaultdict(float)
    by_kernel: dict[str, float] = collections.defaultdict(float)
    by_class: dict[str, float] = collections.defaultdict(float)
    by_scope: dict[str, float] = collections.defaultdict(float)
    for kernel, op, start, duration in events:
        interval = (start, start + duration)
        kind = collective_kind(kernel, op)
        if kind is None:
            compute.append(interval)
            scope = scopes.get(op) or scopes.get(kernel, "")
            by_kernel[kernel] += duration
            by_class[classify(kernel, scope)] += duration
            by_scope[scope_group(scope) if scope else f"(no scope) {kernel}"] += duration
            continue
        collective.append(interval)
        by_kind[kind] += duration
        by_launch[kind, op or kernel] += duration
    compute_u, collective_u = union_ns(compute), union_ns(collective)
    busy_u = union_ns(compute + collective)
    busy = covered_ns(busy_u)
    gaps = idle_gaps(events, busy_u, lambda kernel, op: scope_group(scopes.get(op) or scopes.get(kernel, kernel)))
    per_step = lambda ns: round(ns / 1e6 / steps, 3)  # noqa: E731
    largest = lambda totals, top: {k: per_step(v) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])[:top]}  # noqa: E731
    return {
        "compute_ms": per_step(covered_ns(compute_u)),
        "collective_ms": per_step(sum(by_kind.values())),
        "exposed_collective_ms": per_step(uncovered_ns(collective_u, compute_u)),
        "idle_ms": round(max(wall_ms - busy / 1e6 / steps, 0.0), 3),
        "gap_ms": per_step(sum(gaps.values())),
        "largest_gaps_ms": {f"{before} -> {after}": ms for (before, after), ms in largest(gaps, TOP_GAPS).items()},
        "collective_ms_by_kind": {k: per_step(v) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "largest_collectives_ms": {
            f"{kind}: {name}": per_step(ns) for (kind, name), ns in sorted(by_launch.items(), key=lambda kv: -kv[1])[:8]
        },
        # summed durations (overlaps counted twice), largest first: set beside another mesh's to diff
        "compute_ms_by_class": largest(by_class, len(by_class)),
        "compute_ms_by_scope": largest(by_scope, TOP_KERNELS),
        "compute_ms_by_kernel": largest(by_kernel, TOP_KERNELS),
    }


def device_timelines(profile, plane_prefix: str = DEVICE_PLANE_PREFIX) -> dict[str, list[tuple[str, str, int, int]]]:
    """Device plane name -> its (kernel, launching HLO instruction, start ns, duration ns) events. Where a plane has
    CUDA stream lines, only those are read (other lines summarize the same time)."""
    timelines = {}
    for plane in profile.planes:
        if not plane.name.startswith(plane_prefix):
            continue
        lines = list(plane.lines)
        streams = [line for line in lines if line.name.startswith("Stream")] or lines
        timelines[plane.name] = [launch(event) for line in streams for event in line.events]
    return timelines


def mesh_profile(cfg, steps: int, keep_trace: Path | None = None) -> dict:
    """Profile ``cfg``'s train step on its mesh over ``steps`` batches (see the module docstring)."""
    with mesh_training(cfg) as (mesh, task, setup, batches), tempfile.TemporaryDirectory() as tmp:
        trace = keep_trace or Path(tmp) / "trace.xplane.pb"
        profile = profile_steps(setup, [batches(step) for step in range(steps)], trace)
        timelines = device_timelines(jax.profiler.ProfileData.from_file(str(trace)))
    items = task.items_per_batch() * cfg.train.grad_accum_steps
    return {
        "config": cfg.name,
        "mesh": dict(mesh.shape),
        "fsdp_gather": cfg.mesh.fsdp_gather,
        "grad_reduce": cfg.mesh.grad_reduce,
        "batch_size": cfg.train.batch_size,
        "seq_len": cfg.train.seq_len,
        "steps": steps,
        "device": getattr(jax.devices()[0], "device_kind", str(jax.devices()[0])),
        "step_wall_ms": round(profile.step_wall_ms, 3),
        "items_per_s": round(items / (profile.step_wall_ms / 1e3), 1),
        "unit": task.unit,
        "devices": {
            name: device_breakdown(events, steps, profile.step_wall_ms, profile.scopes)
            for name, events in timelines.items()
        },
    }


def markdown(report: dict, command: str) -> list[str]:
    lines = [
        f"# Train step per device: {report['config']}, mesh {report['mesh']} ({report['device']})",
        "",
        f"Batch {report['batch_size']} x {report['seq_len']}, fsdp_gather {report['fsdp_gather']}, "
        f"grad_reduce {report.get('grad_reduce', 'xla')}; "
        f"{report['steps']} steps traced; step {report['step_wall_ms']:.1f} ms wall, "
        f"{report['items_per_s']:,.0f} {report['unit']}/s. Per step, ms. "
        + (
            "Command buffers off (every launch named)."
            if report.get("launches_named")
            else "Command buffers on: kernels inside them have no scope (--name_launches)."
        ),
        f"Command: `{command}`",
        "",
        "| device | compute | collectives | exposed collectives | idle | collectives by kind |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in report["devices"].items():
        kinds = ", ".join(f"{k} {v:.1f}" for k, v in d["collective_ms_by_kind"].items()) or "none"
        lines.append(
            f"| {name} | {d['compute_ms']:.1f} | {d['collective_ms']:.1f} | {d['exposed_collective_ms']:.1f} | "
            f"{d['idle_ms']:.1f} | {kinds} |"
        )
    if not report["devices"]:
        lines.append("| (no device timelines in the trace: not a GPU run) | | | | | |")
        return lines
    first, first_device = next(iter(report["devices"].items()))
    if first_device.get("largest_gaps_ms"):
        lines += [
            "",
            f"Idle gaps inside the traced steps, {first}: {first_device['gap_ms']:.1f} ms per step, largest places "
            "(scope before -> scope after):",
            "",
            "| gap | ms per step |",
            "|---|---|",
        ]
        lines += [f"| {place} | {ms:.2f} |" for place, ms in first_device["largest_gaps_ms"].items()]
    classes = list(first_device["compute_ms_by_class"])
    lines += ["", "Compute by operator class (summed kernel time, ms per step):", ""]
    lines += [f"| device | {' | '.join(classes)} |", "|---|" + "---|" * len(classes)]
    for name, d in report["devices"].items():
        lines.append(f"| {name} | {' | '.join(f'{d["compute_ms_by_class"].get(c, 0):.1f}' for c in classes)} |")
    return lines


def beside(report: dict, other: dict, label: str, top: int = 12) -> list[str]:
    """Markdown: the first device of ``report`` against the first of ``other`` (another run's report, e.g. the same
    config on one device), per step: the step's parts, compute by operator class, and the ``top`` op scope groups
    whose compute time changed most. Where a scaling loss goes, kernel class by class."""
    if not report["devices"] or not other.get("devices"):
        return []
    (mine, *_), (theirs, *_) = report["devices"].values(), other["devices"].values()
    rows = [("wall", report["step_wall_ms"], other["step_wall_ms"])]
    parts = ("compute_ms", "exposed_collective_ms", "idle_ms", "gap_ms")
    rows += [(k.removesuffix("_ms"), mine.get(k, 0.0), theirs.get(k, 0.0)) for k in parts]

    def entries(key: str) -> list[tuple[str, float, float]]:  # every entry of a by-dict in either run
        a, b = mine.get(key, {}), theirs.get(key, {})  # reports from before a breakdown existed lack it
        return [(name, a.get(name, 0.0), b.get(name, 0.0)) for name in dict.fromkeys([*a, *b])]

    rows += [(f"class: {name}", a, b) for name, a, b in entries("compute_ms_by_class")]
    moved = sorted(entries("compute_ms_by_scope"), key=lambda row: -abs(row[1] - row[2]))[:top]
    rows += [(f"scope: {name}", a, b) for name, a, b in moved]
    lines = ["", f"Against {label} (mesh {other['mesh']}, batch {other['batch_size']}), first device, ms per step:", ""]
    lines += ["| part | this run | beside | change |", "|---|---|---|---|"]
    lines += [f"| {name} | {a:.1f} | {b:.1f} | {a - b:+.1f} |" for name, a, b in rows]
    return lines


def read_beside(path: str) -> dict:
    """Another run's report (``--out``'s .json) for ``--beside``, checked before anything runs."""
    try:
        other = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"--beside {path}: not a readable compare.scaling.mesh_profile JSON report ({err})") from err
    if not isinstance(other, dict) or not {"devices", "mesh", "step_wall_ms", "batch_size"} <= set(other):
        raise ValueError(
            f"--beside {path}: not a compare.scaling.mesh_profile report (needs devices, mesh, step_wall_ms)"
        )
    return other


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.scaling.mesh_profile",
        description="Per device: compute, collective, exposed collective and idle time of a config's train step on "
        "its mesh.",
        epilog="overrides as for python -m jax_mamba.train, e.g. --mesh.data=2 --batch_size=8 --seq_len=2048",
    )
    parser.add_argument("--config", default="default", help="bundled config name or YAML path")
    parser.add_argument("--steps", type=int, default=5, help="batches per pass (warm-up, timed, traced)")
    parser.add_argument("--out", help="output path without suffix (.json, .md)")
    parser.add_argument("--keep_trace", help="where to copy the trace (XPlane protobuf)")
    parser.add_argument("--beside", help="another run's .json report (e.g. one device) to set this one beside")
    parser.add_argument("--name_launches", action="store_true", help="XLA command buffers off (every launch named)")
    args, rest = parse_args_with_overrides(parser, argv)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    try:
        other = read_beside(args.beside) if args.beside else None
    except ValueError as err:
        parser.error(str(err))
    try:
        cfg = load_config(args.config, rest)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.name_launches:
        name_every_launch()  # before the backend starts (the first device query)
    began = time.perf_counter()
    report = mesh_profile(cfg, args.steps, Path(args.keep_trace) if args.keep_trace else None)
    report["seconds"] = round(time.perf_counter() - began, 1)
    report["launches_named"] = args.name_launches
    command = " ".join(["python -m compare.scaling.mesh_profile", *(argv if argv is not None else sys.argv[1:])])
    lines = markdown(report, command) + (beside(report, other, args.beside) if other else [])
    print(json.dumps(report), flush=True)
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        output_path(out, ".json").write_text(json.dumps({**report, "command": command}, indent=2))
        output_path(out, ".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
