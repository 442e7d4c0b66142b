"""Nsight Compute counters of chosen kernels, for the characterization reports (the seed paper's roofline, bandwidth
and pipe measurements).

``ncu`` runs a target program with ``--profile-from-start off``: the target warms up, then opens a capture range
(``cuProfilerStart`` / ``cudaProfilerStart``) around the one step to measure, so compilation and autotuning stay
out. ``--clock-control none`` leaves the GPU's clocks as found (the device notes say never to change them). Only
the named kernels are replayed (``--kernel-name regex:``, up to ``--launch-count`` launches): counters need several
replays per launch, so a whole step would take minutes.

Per kernel function name the launches are summed: DRAM bytes read and written, duration, L2 traffic, FP32/FP16
instruction FLOPs (FMA counted twice) and tensor-path operations (as executed: a dot tile padded past the data counts
in full); rates and percentages are duration-weighted means. Derived: achieved DRAM bandwidth,
arithmetic intensity (FLOPs per DRAM byte), and the average thread-block lifetime, estimated as duration / waves
(a wave: as many blocks as the GPU holds at once), which is the paper's "short thread-block lifetime" in numbers.
"""

import collections
import contextlib
import csv
import ctypes
import functools
import io
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

# field -> ncu metric names, first available wins (names differ across GPU generations and ncu versions)
METRICS: dict[str, tuple[str, ...]] = {
    "duration_ns": ("gpu__time_duration.sum",),
    "dram_read_bytes": ("dram__bytes_read.sum",),
    "dram_write_bytes": ("dram__bytes_write.sum",),
    "dram_peak_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",),
    "l2_bytes": ("lts__t_bytes.sum",),
    "l2_hit_pct": ("lts__t_sector_hit_rate.pct",),
    "l1_hit_pct": ("l1tex__t_sector_hit_rate.pct",),
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "grid_size": ("launch__grid_size",),
    "block_size": ("launch__block_size",),
    "waves": ("launch__waves_per_multiprocessor",),
    "ffma": ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum",),
    "fadd": ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum",),
    "fmul": ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum",),
    "hfma": ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum",),
    "hadd": ("sm__sass_thread_inst_executed_op_hadd_pred_on.sum",),
    "hmul": ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum",),
    "tensor_flops": (
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
        "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    ),
    "tensor_pipe_pct": ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",),
    "hmma_pipe_pct": ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",),
    "fma_pipe_pct": ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",),
    "alu_pipe_pct": ("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",),
    "xu_pipe_pct": (
        "sm__pipe_xu_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    ),
}
SUMMED = {
    "duration_ns",
    "dram_read_bytes",
    "dram_write_bytes",
    "l2_bytes",
    "ffma",
    "fadd",
    "fmul",
    "hfma",
    "hadd",
    "hmul",
    "tensor_flops",
}  # per-launch counts, summed over a kernel's launches
PIPES = ("tensor_pipe_pct", "hmma_pipe_pct", "fma_pipe_pct", "alu_pipe_pct", "xu_pipe_pct")
VECTOR_PIPES = ("fma_pipe_pct", "alu_pipe_pct", "xu_pipe_pct")
NOT_KERNELS = ("Memcpy", "Memset", "memcpy", "memset")  # copies in the traces: not kernels ncu can replay
ALWAYS = ("launch__", "device__")  # launch attributes: not in ``--query-metrics``, always collected
_UNIT_SCALE = {  # unit prefixes to bytes and ns
    "byte": 1,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "nsecond": 1,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "ns": 1,
    "us": 1e3,
    "ms": 1e6,
    "s": 1e9,
}


def metric_base(metric: str) -> str:
    """``dram__bytes_read.sum`` -> ``dram__bytes_read`` (what ``ncu --query-metrics`` lists)."""
    return metric.split(".", 1)[0]


def available_bases(query_output: str) -> set[str]:
    """The metric base names in ``ncu --query-metrics`` output (first column of its table)."""
    return {m.group(1) for m in re.finditer(r"^([a-z0-9_]+__[a-z0-9_]+)\s", query_output, re.MULTILINE)}


def choose_metrics(available: set[str] | None) -> dict[str, str]:
    """field -> the first of its candidate metrics whose base ``available`` has (all firsts when unknown)."""
    chosen = {}
    for field, candidates in METRICS.items():
        name = next(
            (m for m in candidates if available is None or m.startswith(ALWAYS) or metric_base(m) in available), None
        )
        if name is not None:
            chosen[field] = name
    return chosen


@functools.cache
def query_available() -> set[str] | None:
    """Metric bases the GPU present supports, or None if ncu cannot say (asked once per process)."""
    try:
        result = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    bases = available_bases(result.stdout)
    return bases or None


def function_base(name: str) -> str:
    """A kernel's bare function name, as ncu's ``function`` name base prints it: no return type, namespaces,
    template arguments or parameters (``void at::native::(anonymous namespace)::foo<4, F>(int)`` -> ``foo``).
    Profilers demangle templates differently, so kernels are matched across them by this name."""
    name = name.replace("(anonymous namespace)", "")
    out, depth = [], 0
    for char in name:
        if char in "<(":
            if depth == 0 and char == "(" and out:
                break
            depth += 1
        elif char in ">)":
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out).split()[-1].split("::")[-1] if "".join(out).split() else name


def regex_escape(name: str) -> str:
    """Escape a kernel name for ncu's regular expressions (ECMAScript: only the syntax characters)."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", name)


def kernel_filter(names: list[str]) -> str:
    """ncu's ``--kernel-name`` value matching exactly these function names (``function_base``)."""
    return "regex:^(" + "|".join(regex_escape(n) for n in names) + ")$"


def ncu_command(
    target: list[str], kernels: list[str] | None, launches: int, metrics: list[str], report: Path
) -> list[str]:
    """ncu's command line; ``kernels`` None: every kernel in the capture range."""
    only = [] if kernels is None else ["--kernel-name", kernel_filter(kernels)]
    return [
        "ncu",
        "--clock-control", "none",
        "--profile-from-start", "off",
        "--target-processes", "application-only",  # the target itself, never a compiler it starts
        "--kernel-name-base", "function",
        *only,
        "--launch-count", str(launches),
        "--metrics", ",".join(metrics),
        "--export", str(report),
        "--force-overwrite",
        *target,
    ]  # fmt: skip


def _number(text: str) -> float | None:
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def parse_raw_csv(text: str, chosen: dict[str, str]) -> list[dict]:
    """``ncu --import R --csv --page raw --print-units base`` -> one dict per launch: ``kernel`` and every chosen
    field that has a value (bytes and ns, whatever unit prefix a column carries)."""
    rows = list(csv.reader(io.StringIO(text[text.index('"ID"') :] if '"ID"' in text else text)))
    if len(rows) < 2:
        return []
    header, units = rows[0], rows[1]
    column = {name: i for i, name in enumerate(header)}
    launches = []
    for row in rows[2:]:
        if len(row) != len(header):
            continue
        launch: dict = {"kernel": row[column["Kernel Name"]]}
        for field, metric in chosen.items():
            i = column.get(metric)
            value = None if i is None else _number(row[i])
            if value is not None:
                launch[field] = value * _UNIT_SCALE.get(units[i], 1)
        launches.append(launch)
    return launches


def aggregate(launches: list[dict]) -> dict[str, dict]:
    """Per kernel name: counts summed over its launches, everything else a duration-weighted mean; ``launches``."""
    by_kernel: dict[str, list[dict]] = collections.defaultdict(list)
    for launch in launches:
        by_kernel[launch["kernel"]].append(launch)
    result = {}
    for kernel, group in by_kernel.items():
        weights = [g.get("duration_ns", 1.0) for g in group]
        total = sum(weights) or 1.0
        merged: dict = {"launches": len(group)}
        for field in {f for g in group for f in g} - {"kernel"}:
            values = [(g[field], w) for g, w in zip(group, weights, strict=True) if field in g]
            if field in SUMMED:
                merged[field] = sum(v for v, _ in values)
            else:
                merged[field] = sum(v * w for v, w in values) / (sum(w for _, w in values) or total)
        result[kernel] = merged
    return result


def derived(counters: dict, copy_gbs: float | None) -> dict:
    """Per-kernel summary from summed counters: us per launch, bytes, GB/s (and % of the measured copy ceiling),
    vector and tensor FLOPs, arithmetic intensity, block lifetime estimate (us), pipe utilizations."""
    n = counters["launches"]
    seconds = counters.get("duration_ns", 0.0) / 1e9
    dram = counters.get("dram_read_bytes", 0.0) + counters.get("dram_write_bytes", 0.0)
    vector = 2 * counters.get("ffma", 0.0) + counters.get("fadd", 0.0) + counters.get("fmul", 0.0)
    vector += 2 * (2 * counters.get("hfma", 0.0) + counters.get("hadd", 0.0) + counters.get("hmul", 0.0))
    tensor = counters.get("tensor_flops", 0.0)
    out = {
        "launches": n,
        "us_per_launch": seconds * 1e6 / n,
        "dram_bytes_per_launch": dram / n,
        "dram_gbs": dram / seconds / 1e9 if seconds else 0.0,
        "vector_flops_per_launch": vector / n,
        "tensor_flops_per_launch": tensor / n,
        "tflops": (vector + tensor) / seconds / 1e12 if seconds else 0.0,
        "arithmetic_intensity": (vector + tensor) / dram if dram else None,
        "tensor_to_vector_flops": tensor / vector if vector else None,
    }
    if copy_gbs:
        out["dram_pct_of_copy"] = 100 * out["dram_gbs"] / copy_gbs
    if counters.get("waves"):
        out["block_lifetime_us"] = out["us_per_launch"] / max(counters["waves"], 1.0)
    for field in ("dram_peak_pct", "l2_hit_pct", "l1_hit_pct", "occupancy_pct", "grid_size", "block_size", "waves",
                  *PIPES):  # fmt: skip
        if field in counters:
            out[field] = counters[field]
    if "l2_bytes" in counters:
        out["l2_bytes_per_launch"] = counters["l2_bytes"] / n
    vector_pipes = [counters[p] for p in VECTOR_PIPES if p in counters]
    tensor_pipes = [counters[p] for p in ("tensor_pipe_pct", "hmma_pipe_pct") if p in counters]
    if vector_pipes and tensor_pipes and max(tensor_pipes) > 0:
        out["vector_bound"] = max(vector_pipes) > max(tensor_pipes)
    return out


class NcuError(RuntimeError):
    """ncu failed or ran past its time limit; the message ends with its log."""


def profile_kernels(
    target: list[str], kernels: list[str] | None, launches: int, report: Path, timeout_s: float = 600
) -> tuple[dict, dict]:
    """Run ``target`` under ncu for ``launches`` launches of ``kernels`` (function names; None: any) -> ({function
    name: summed counters}, {"metrics": field -> metric, "command": ...}); the report, its CSV and ncu's log (``.log``)
    stay beside ``report``. Raises NcuError if ncu fails or runs past ``timeout_s``."""
    chosen = choose_metrics(query_available())
    command = ncu_command(target, kernels, launches, sorted(set(chosen.values())), report.with_suffix(""))
    log = report.with_suffix(".log")
    with log.open("w") as sink:
        try:
            env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a crash in the target leaves its Python stack in the log
            returncode = subprocess.run(
                command, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout_s, env=env
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = f"timeout after {timeout_s:.0f} s"
    if returncode != 0 or not report.exists():
        raise NcuError(f"ncu failed ({returncode}):\n{log.read_text()[-3000:]}")
    imported = subprocess.run(
        ["ncu", "--import", str(report), "--csv", "--page", "raw", "--print-units", "base",
         "--print-kernel-base", "function"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    report.with_suffix(".csv").write_text(imported.stdout)
    meta = {"metrics": chosen, "command": " ".join(command[: command.index("--export")]) + " <target>"}
    return aggregate(parse_raw_csv(imported.stdout, chosen)), meta


def by_function(values: dict[str, float]) -> dict[str, float]:
    """{kernel name: value} summed per ``function_base`` (the unit ncu filters and reports by)."""
    out: dict[str, float] = collections.defaultdict(float)
    for name, value in values.items():
        out[function_base(name)] += value
    return dict(out)


def choose_kernels(kernel_us: dict[str, float], launches: dict[str, float], count: int, max_launches: int):
    """The longest kernels by function name (time per step summed over a function's instantiations), at most
    ``count`` names and ``max_launches`` launches per step in all; a function whose launches would pass the cap is
    skipped for shorter ones. -> (function names, launches)."""
    names, total = [], 0
    per_launch = by_function(launches)
    kernels = {k: us for k, us in kernel_us.items() if not k.startswith(NOT_KERNELS)}
    for function, _ in sorted(by_function(kernels).items(), key=lambda kv: -kv[1]):
        n = round(per_launch.get(function, 1))
        if len(names) == count:
            break
        if total + n <= max_launches:
            names.append(function)
            total += n
    return names, total


@contextlib.contextmanager
def cuda_profiler_range() -> Iterator[None]:
    """The driver's capture range (``cuProfilerStart``/``Stop``) on device 0's primary context, which JAX uses:
    a profiler started with ``--profile-from-start off`` records only the launches inside."""
    cuda = ctypes.CDLL("libcuda.so.1")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    for call, args in (
        ("cuDeviceGet", (ctypes.byref(device), 0)),
        ("cuDevicePrimaryCtxRetain", (ctypes.byref(context), device)),
        ("cuCtxPushCurrent_v2", (context,)),
        ("cuProfilerStart", ()),
    ):
        status = getattr(cuda, call)(*args)
        if status != 0:
            raise RuntimeError(f"{call} returned CUDA error {status}")
    try:
        yield
    finally:
        cuda.cuProfilerStop()
        cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        cuda.cuDevicePrimaryCtxRelease_v2(device)
