"""``compare.characterize --ncu``: Nsight Compute counters of a training step's longest kernels in each framework,
against the ceilings measured in the same run, and the headline figures the seed paper reports.

The ceilings are measured once per run with JAX (``compare.kernels``): the read+write bandwidth of an elementwise
pass over 1 GiB (the practical DRAM ceiling) and a bf16 8192³ matmul (the practical tensor-core ceiling); the FP32
vector ceiling is the device's arithmetic peak (SMs x 128 lanes x 2 FLOPs x max SM clock), not a measurement."""

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compare.characterize.ncu import NcuError, by_function, choose_kernels, derived, function_base, profile_kernels

FP32_LANES_PER_SM = 128


@dataclass(frozen=True)
class Figure:
    """One headline figure: its key in ``headline``'s dict, its label in a report and in the summary's header."""

    key: str
    label: str
    short: str
    spec: str
    scale: float = 1.0

    def cell(self, figures: dict) -> str:
        value = figures.get(self.key)
        return "-" if value is None else format(value * self.scale, self.spec)


HEADLINE_FIGURES = (
    Figure("step_wall_ms", "wall per step (ms, outside the profiler)", "wall ms/step", ".2f"),
    Figure(
        "step_wall_ms_as_trained", "wall per step as trained (ms; JAX: command buffers on)", "trained ms/step", ".2f"
    ),
    Figure("device_ms", "kernel time per step (ms)", "kernel ms/step", ".2f"),
    Figure("gemm_share", "GEMM share (%)", "GEMM %", ".1f", 100.0),
    Figure("ssm_share", "SSM share (%)", "SSM %", ".1f", 100.0),
    Figure("counter_coverage", "profiled kernels' share of kernel time (%)", "counted %", ".0f", 100.0),
    Figure("dram_pct_of_peak", "DRAM bandwidth, % of ncu's peak (time-weighted)", "DRAM % of peak", ".1f"),
    Figure("dram_pct_of_copy", "DRAM bandwidth, % of the measured copy ceiling", "DRAM % of copy", ".1f"),
    Figure("ssm_dram_pct_of_peak", "SSM kernels: DRAM bandwidth, % of peak", "SSM DRAM % of peak", ".1f"),
    Figure("ssm_arithmetic_intensity", "SSM arithmetic intensity (FLOP/DRAM byte)", "SSM FLOP/byte", ".2f"),
    Figure("ssm_block_lifetime_us", "SSM block lifetime (us, estimate, time-weighted)", "SSM block life us", ".1f"),
    Figure(
        "ssm_tensor_kernels_vector_bound_share",
        "tensor-core SSM kernels' time that is vector-bound (%)",
        "vector-bound % (tensor SSM kernels)",
        ".0f",
        100.0,
    ),
)


def measure_ceilings(reps: int = 10) -> dict:
    """{"copy_gbs", "matmul_tflops", "vector_tflops", "device"} on the GPU JAX sees."""
    from compare.kernels.bench import copy_bandwidth_gbs, device_info, matmul_tflops

    info = device_info()
    vector = None
    if info.get("sm_count") and info.get("sm_clock_mhz"):
        vector = info["sm_count"] * FP32_LANES_PER_SM * 2 * info["sm_clock_mhz"] * 1e6 / 1e12
    return {
        "copy_gbs": copy_bandwidth_gbs(reps),
        "matmul_tflops": matmul_tflops(reps),
        "vector_tflops": vector,
        "device": info,
    }


def ncu_target(framework: str, config: str, overrides: list[str]) -> list[str]:
    """The command ncu runs: a warm step inside a capture range (JAX: ``compare.characterize.ncu_target``; PyTorch:
    ``torch_reference.step_profile --ncu-window``)."""
    if framework == "jax":
        return [sys.executable, "-m", "compare.characterize.ncu_target", "--config", config, *overrides]
    return [sys.executable, "-m", "torch_reference.step_profile", "--config", config, "--ncu-window", "--steps=1",
            *overrides]  # fmt: skip


def side_counters(
    side: dict,
    config: str,
    overrides: list[str],
    out: Path,
    ceilings: dict,
    count: int,
    max_launches: int,
    timeout_s: float = 600,
) -> dict:
    """Counters of ``side``'s longest kernels, by function name (a templated kernel's instantiations together):
    {"kernels": [per function: trace time, category (its longest instantiation's), ncu figures],
    "unmatched": names ncu did not report, "coverage": their share of the step's kernel time, "metrics",
    "command"}, or {"error": ncu's message, ...} with no kernels if ncu failed (the report says so)."""
    totals = side["kernel_totals"]
    names, launches = choose_kernels({k: v["us"] for k, v in totals.items()}, side["launches"], count, max_launches)
    report = out / f"ncu-{side['framework']}.ncu-rep"
    target = ncu_target(side["framework"], config, overrides)
    try:
        with tempfile.TemporaryDirectory(prefix="ncu-compile-cache-") as cache:
            if side["framework"] == "jax":
                target += ["--compile-cache", cache]
                prime(target, timeout_s)
            counters, meta = profile_kernels(target, names, launches, report, timeout_s)
    except NcuError as error:
        return {"error": str(error), "kernels": [], "unmatched": names, "coverage": 0.0}
    us = by_function({k: v["us"] for k, v in totals.items()})
    category = {function_base(k): v["category"] for k, v in sorted(totals.items(), key=lambda kv: kv[1]["us"])}
    kernels = [
        {"kernel": name, "us": us[name], "category": category[name], **derived(counters[name], ceilings["copy_gbs"])}
        for name in names
        if name in counters
    ]
    covered = sum(k["us"] for k in kernels)
    return {
        "kernels": kernels,
        "target_overrides": overrides,
        "unmatched": [name for name in names if name not in counters],
        "coverage": covered / (1e3 * side["device_ms"]) if side["device_ms"] else 0.0,
        **meta,
    }


def prime(target: list[str], timeout_s: float) -> None:
    """Run ``target`` once without ncu (JAX: fills its compilation cache, so that nothing compiles under ncu).
    Raises NcuError with its output's tail if it fails."""
    try:
        done = subprocess.run(target, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        raise NcuError(f"the target's warm-up run passed {timeout_s:.0f} s") from error
    if done.returncode != 0:
        raise NcuError(f"the target's warm-up run failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")


def _weighted(kernels: list[dict], field: str) -> float | None:
    pairs = [(k[field], k["us"]) for k in kernels if k.get(field) is not None]
    weight = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / weight if weight else None


def headline(side: dict) -> dict:
    """The paper's headline figures for one side: GEMM and SSM shares of kernel time; with counters, the
    time-weighted DRAM bandwidth utilization (of ncu's peak and of the measured copy ceiling) over the profiled
    kernels, the SSM kernels' arithmetic intensity (their FLOPs over their DRAM bytes), time-weighted block
    lifetime, and the share of tensor-core SSM kernels' time that is vector-bound."""
    total = side["device_ms"] or 1.0
    out = {
        "gemm_share": side["categories_ms"]["GEMM"] / total,
        "ssm_share": side["categories_ms"]["SSM"] / total,
        "step_wall_ms": side["step_wall_ms"],
        # PyTorch's wall is taken in its own execution mode, as trained; JAX's as trained is a run of its own
        "step_wall_ms_as_trained": side.get("step_wall_ms_as_trained")
        if side["framework"].startswith("jax")
        else side["step_wall_ms"],
        "device_ms": side["device_ms"],
    }
    counters = side.get("counters")
    if not counters or not counters["kernels"]:
        return out
    kernels = counters["kernels"]
    ssm = [k for k in kernels if k["category"] == "SSM"]
    out["counter_coverage"] = counters["coverage"]
    out["dram_pct_of_peak"] = _weighted(kernels, "dram_peak_pct")
    out["dram_pct_of_copy"] = _weighted(kernels, "dram_pct_of_copy")
    out["ssm_dram_pct_of_peak"] = _weighted(ssm, "dram_peak_pct")
    flops = sum(k["launches"] * (k["vector_flops_per_launch"] + k["tensor_flops_per_launch"]) for k in ssm)
    bytes_ = sum(k["launches"] * k["dram_bytes_per_launch"] for k in ssm)
    out["ssm_arithmetic_intensity"] = flops / bytes_ if bytes_ else None
    out["ssm_block_lifetime_us"] = _weighted(ssm, "block_lifetime_us")
    mixed = [k for k in ssm if k["tensor_flops_per_launch"] > 0 and "vector_bound" in k]
    if mixed:
        out["ssm_tensor_kernels_vector_bound_share"] = sum(k["us"] for k in mixed if k["vector_bound"]) / sum(
            k["us"] for k in mixed
        )
    return out
