"""Kernel benchmarks, ours against mamba-ssm's side by side in one process: ``python -m compare.kernels``.

For each shape it times the forward and the forward+backward of every JAX impl (``--impls``, plus any
``--pallas-config`` tiling variants) and of mamba-ssm's kernel (``--torch``) on the same input values, each in its
native layout. A time is the median over ``--reps`` samples of ``back-to-back calls / count`` after warm-up
(compilation and autotuning excluded), each sample as many calls as fill ``--sample-ms`` (``SAMPLE_MS``), then one
sync. A decoding step is timed as a compiled decoding loop runs it: ``ops.DECODE_LOOP_STEPS`` steps a call (ours in
one jit-compiled loop, mamba-ssm's captured as one CUDA graph), per step. ``--profile`` adds each kernel's device
time and the GPU's idle stretches from a trace. Also printed:
speed-up over mamba-ssm, effective bandwidth (compulsory bytes / time), achieved TFLOP/s and the floor:
max(compulsory bytes / measured copy bandwidth, FLOPs / measured bf16 matmul rate, exps / SFU rate) and, on
forward+backward rows, the memory the forward keeps for the backward beyond its inputs (JAX: the vjp's residuals;
mamba-ssm: the tensors autograd saves). ``compare.kernels.ops`` defines each op's shapes, inputs and cost model.
mamba-ssm is timed eagerly and as a CUDA graph (``mamba-ssm CUDA graph``: its calls captured once after warm-up
and replayed, ``torch_reference.step_modes.replayed``): the speed-up is against the faster of the two ("(graph)"
where that is the replay), both rows stay in the table. ``--profile`` records the kernel-only time (the kernels' sum
from the profiler) on both sides. ``--op ssd --impls pallas mamba_ssm_triton`` adds mamba-ssm's own Triton kernels
launched from JAX (forward and backward): the mamba-ssm column's kernels with JAX around them. Writes ``<out>.json``
and ``<out>.md``.
"""

import argparse
import dataclasses
import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp

from compare.kernels.launches import kernel_totals, launch_gaps, launches_us_by_op, traced_launches
from compare.kernels.ops import OPS, KernelOp, Variant
from compare.outputs import output_path
from compare.parity.tolerances import rel_l2

SFU_EXP2_PER_CLOCK_PER_SM = 16


# Each timed sample runs back-to-back calls filling this many ms, then one sync. A sample also pays a fixed start and
# stop (the first call's dispatch, the sync): about 0.7 ms with JAX at the long SSD shape on an H200 (12.23 ms a call
# timed alone, 11.60 over eight back to back). Samples of 200 ms hold 9 or more calls of up to 22 ms, near the
# steady rate a training loop sees, for either side.
SAMPLE_MS = 200.0


def median_ms(
    fn: Callable[[], object], sync: Callable[[object], None], reps: int, target_ms: float = SAMPLE_MS
) -> float:
    """Median over ``reps`` of the mean time of back-to-back calls (as many as fill ``target_ms``, 1-200), after
    warm-up, in ms."""
    sync(fn())
    began = time.perf_counter()
    sync(fn())
    once = max(time.perf_counter() - began, 1e-6)
    count = max(1, min(200, int(target_ms / 1e3 / once)))
    for _ in range(2):
        sync(fn())
    samples = []
    for _ in range(reps):
        began = time.perf_counter()
        for _ in range(count):
            out = fn()
        sync(out)
        samples.append((time.perf_counter() - began) / count * 1e3)
    return statistics.median(samples)


def time_passes(forward, forward_backward, sync, reps: int, sample_ms: float = SAMPLE_MS) -> dict[str, float]:
    """ms of the forward and of the forward+backward (where the op has one: ``forward_backward`` not None), each by
    ``median_ms`` over samples of ``sample_ms`` or more."""
    passes = {"forward": forward, "forward+backward": forward_backward}
    return {name: median_ms(fn, sync, reps, sample_ms) for name, fn in passes.items() if fn is not None}


def per_step(passes: dict[str, float], steps: int) -> dict[str, float]:
    """``time_passes``'s ms per call as ms per step, for calls that run ``steps`` steps (a decoding step's loop)."""
    return {name: ms / steps for name, ms in passes.items()}


TORCH_GRAPHED = "mamba-ssm CUDA graph"  # mamba-ssm's calls captured once and replayed: no launch overhead


def time_replayed(forward, forward_backward, sync, reps: int, sample_ms: float) -> tuple[dict, dict]:
    """``time_passes`` of the PyTorch calls captured once as CUDA graphs and replayed, and {pass: the error's first
    line} for each pass whose capture failed (an op that launches on the legacy stream, say, which a capture cannot
    hold: mamba-ssm's Mamba-3 backward): that pass then has its eager figure only."""
    from torch_reference.step_modes import replayed

    timed, failed = {}, {}
    for name, fn in {"forward": forward, "forward+backward": forward_backward}.items():
        if fn is None:
            continue
        try:
            graph = replayed(fn)
        except RuntimeError as err:  # torch.AcceleratorError too
            while err.__context__ is not None:  # the capture's end reports only that an earlier call failed
                err = err.__context__
            failed[name] = (str(err).strip().splitlines() or [type(err).__name__])[0]
            continue
        timed[name] = median_ms(graph, sync, reps, sample_ms)
    return timed, failed


def fastest_reference(timed: dict[str, dict[str, float]], pass_name: str) -> tuple[str | None, float | None]:
    """(label, ms) of the faster PyTorch figure of a pass, eager or replayed as a CUDA graph; (None, None) if
    mamba-ssm was not timed."""
    figures = {
        label: timed[label][pass_name] for label in ("mamba-ssm", TORCH_GRAPHED) if pass_name in timed.get(label, {})
    }
    if not figures:
        return None, None
    label = min(figures, key=figures.get)
    return label, figures[label]


REGISTERED_IMPLS = {"mamba_ssm_triton": "ssd"}  # impl -> the op it serves: mamba-ssm's Triton kernels from JAX


def jax_sync(out) -> None:
    jax.block_until_ready(out)


def device_info() -> dict:
    dev = jax.devices()[0]
    info = {"device": dev.device_kind, "platform": dev.platform, "sm_count": getattr(dev, "core_count", None)}
    try:
        clock = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
        )
        info["sm_clock_mhz"] = float(clock.stdout.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        info["sm_clock_mhz"] = None
    return info


def copy_bandwidth_gbs(reps: int) -> float:
    """Read+write bandwidth of an elementwise pass over 1 GiB (bf16), the practical memory ceiling."""
    x = jnp.ones((2**29,), jnp.bfloat16)
    add = jax.jit(lambda v: v + jnp.bfloat16(1))
    ms = median_ms(lambda: add(x), jax_sync, reps)
    return 2 * x.nbytes / (ms * 1e-3) / 1e9


def matmul_tflops(reps: int) -> float:
    """bf16 tensor-core rate of a large square matmul (8192³, float32 accumulation), the practical FLOP ceiling."""
    a = jnp.ones((8192, 8192), jnp.bfloat16)
    mul = jax.jit(lambda x: jnp.dot(x, x, preferred_element_type=jnp.float32))
    ms = median_ms(lambda: mul(a), jax_sync, reps)
    return 2 * 8192**3 / (ms * 1e-3) / 1e12


def _field_value(key: str, value: str, kind) -> str | int | bool:
    """A config field's value from text: str as is, bool from true/false/1/0, else int."""
    if kind in (str, "str"):
        return value
    if kind in (bool, "bool"):
        if value.lower() not in ("true", "false", "1", "0"):
            raise SystemExit(f"--pallas-config: {key} takes true/false/1/0, got {value!r}")
        return value.lower() in ("true", "1")
    return int(value)


def parse_config(text: str, op: KernelOp = OPS["selective_scan"]) -> Variant:
    """'block_d=32,num_warps=1,...' -> a pallas variant of ``op``'s config class, labelled by the text."""
    if op.config_cls is None:
        raise SystemExit(f"--pallas-config: --op {op.name} has no tiling config")
    types = {f.name: f.type for f in dataclasses.fields(op.config_cls)}
    fields = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key not in types:
            raise SystemExit(f"--pallas-config: unknown field {key!r}; fields: {list(types)}")
        fields[key] = _field_value(key, value, types[key])
    config = op.config_cls(**fields)
    config.validate()
    return Variant(f"pallas[{text}]", "pallas", config, fields)


def for_shape(variant: Variant, op: KernelOp, shape: tuple, dtype: str) -> Variant:
    """A ``--pallas-config`` variant at one shape: its fields laid over the config the op's API would pick there
    (so that naming one field changes only that field), where the op has a shape-aware default."""
    if not variant.overrides or op.shape_config is None:
        return variant
    config = dataclasses.replace(op.shape_config(shape, dtype), **variant.overrides)
    config.validate()
    return dataclasses.replace(variant, config=config)


def shapes_to_run(named: list[str] | None, extras: dict[str, tuple], op: KernelOp) -> list[str]:
    """The shape names to time: those ``--shapes`` names (every shape of the op without it), then each ``--shape``
    extra not among them, so that a shape defined on the command line always runs."""
    chosen = list(named or op.shapes)
    return chosen + [name for name in extras if name not in chosen]


def parse_shapes(items: list[str], op: KernelOp) -> dict[str, tuple]:
    """'name=8,2048,1536,16,1' items -> {name: shape tuple}, each as long as the op's own shapes."""
    width = len(next(iter(op.shapes.values())))
    shapes = {}
    for item in items:
        name, _, values = item.partition("=")
        try:
            shape = tuple(int(v) for v in values.split(","))
        except ValueError:
            shape = ()
        if not name or len(shape) != width or min(shape) < 1:
            raise SystemExit(f"--shape: expected NAME= then {width} positive integers, got {item!r}")
        shapes[name] = shape
    return shapes


def floor_ms(cost: dict, ceiling: dict) -> float:
    """max(bytes / copy bandwidth, FLOPs / matmul rate, exps / SFU rate), in ms."""
    return max(
        cost["bytes"] / (ceiling["copy_gbs"] * 1e9) * 1e3,
        cost["flops"] / (ceiling["matmul_tflops"] * 1e12) * 1e3 if ceiling["matmul_tflops"] else 0.0,
        cost["exps"] / ceiling["exp_per_s"] * 1e3 if ceiling["exp_per_s"] else 0.0,
    )


def device_folder(device_kind: str) -> str:
    """The results folder of a device: its model number in lower case ("NVIDIA H200" -> "h200"), else the name."""
    match = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", device_kind)
    return (match.group(1) if match else re.sub(r"[^A-Za-z0-9]+", "-", device_kind)).lower()


def profiled_kernels(fn, calls: int = 5, idle_kernels: int = 6) -> tuple[dict, dict]:
    """From one trace of ``calls`` calls of ``fn``: {kernel: us per call}, and where the GPU sat idle per call (us:
    traced span, kernels' sum, busy time, and the ``idle_kernels`` kernels with the most idle time before them)."""
    launches = traced_launches(fn, calls)
    times = {k: round(v, 1) for k, v in kernel_totals(launches_us_by_op(launches, calls)).items()}
    gaps = launch_gaps(launches, calls)
    idle = {k: round(v, 1) for k, v in list(gaps["idle_before"].items())[:idle_kernels]}
    return times, {k: round(gaps[k], 1) for k in ("span", "kernels", "busy")} | {"idle_before": idle}


def run_op(op: KernelOp, args, variants: list[Variant], ceiling: dict) -> list[dict]:
    rows = []
    torch_ref = None
    torch_profiles = {}  # shape name -> mamba-ssm's forward+backward, profiled after every JAX trace (one CUPTI client)
    if args.torch:
        from torch_reference.backend import load

        torch_ref = load("cuda", require_extensions=op.torch_extensions)
    for shape_name in args.shapes:
        shape = op.shapes[shape_name]
        arrays, dtypes, cotangent = op.inputs(shape, args.dtype, args.seed)
        costs = op.costs(shape, args.dtype)
        timed = {}
        outputs = {}
        saved = {}  # bytes the forward keeps for the backward beyond its inputs
        kernels, gaps = {}, {}
        graph_failures = {}
        steps = {}  # steps a timed call runs, where more than one (a decoding step's loop)
        if torch_ref is not None:
            calls = op.torch_calls(torch_ref, arrays, dtypes, cotangent, shape)
            outputs["mamba-ssm"] = outputs[TORCH_GRAPHED] = calls.output  # the same kernels: one output
            saved["mamba-ssm"] = saved[TORCH_GRAPHED] = calls.saved_bytes
            eager = time_passes(calls.forward, calls.forward_backward, calls.sync, args.reps, args.sample_ms)
            graphed, graph_failures = time_replayed(
                calls.forward, calls.forward_backward, calls.sync, args.reps, args.sample_ms
            )
            timed["mamba-ssm"], timed[TORCH_GRAPHED] = (per_step(t, calls.steps_per_call) for t in (eager, graphed))
            steps["mamba-ssm"] = steps[TORCH_GRAPHED] = calls.steps_per_call
            print(f"{shape_name} mamba-ssm eager: {timed['mamba-ssm']}, replayed: {timed[TORCH_GRAPHED]}", flush=True)
            for pass_name, error in graph_failures.items():
                print(f"{shape_name} mamba-ssm {pass_name} not captured as a CUDA graph: {error}", flush=True)
            if args.profile and calls.forward_backward is not None:
                torch_profiles[shape_name] = calls.forward_backward
        for variant in variants:
            jax_calls = op.jax_calls(for_shape(variant, op, shape, args.dtype), arrays, dtypes, cotangent, shape)
            forward, forward_backward = jax_calls.forward, jax_calls.forward_backward
            outputs[variant.label], saved[variant.label] = jax_calls.output, jax_calls.saved_bytes
            passes = time_passes(forward, forward_backward, jax_sync, args.reps, args.sample_ms)
            timed[variant.label] = per_step(passes, jax_calls.steps_per_call)
            steps[variant.label] = jax_calls.steps_per_call
            print(f"{shape_name} {variant.label}: {timed[variant.label]}", flush=True)
            if args.profile and forward_backward is not None:
                kernels[variant.label], gaps[variant.label] = profiled_kernels(forward_backward)
                print(f"{shape_name} {variant.label} kernels (us per forward+backward): {kernels[variant.label]}")
                print(f"{shape_name} {variant.label} GPU idle (us per forward+backward): {gaps[variant.label]}")
        base = "mamba-ssm" if "mamba-ssm" in outputs else variants[0].label
        for label, passes in timed.items():
            error = None if label in (base, TORCH_GRAPHED) else float(rel_l2(outputs[label], outputs[base]))
            for pass_name, ms in passes.items():
                cost = costs[pass_name]
                floor = floor_ms(cost, ceiling)
                ref_label, ref_ms = fastest_reference(timed, pass_name)
                rows.append(
                    {
                        "op": op.name,
                        "shape": shape_name,
                        "dims": dict(zip(op.dim_names, shape, strict=True)),
                        "dtype": args.dtype,
                        "impl": label,
                        "pass": pass_name,
                        "ms": round(ms, 4),
                        "speedup_vs_mamba_ssm": None if ref_ms is None else round(ref_ms / ms, 3),
                        "mamba_ssm_fastest": ref_label,
                        "effective_gbs": round(cost["bytes"] / (ms * 1e-3) / 1e9, 1),
                        "tflops": round(cost["flops"] / (ms * 1e-3) / 1e12, 1),
                        "floor_ms": round(floor, 4),
                        "times_floor": round(ms / floor, 2),
                        "saved_mb": round(saved[label] / 2**20, 1) if pass_name == "forward+backward" else None,
                        "out_rel_l2_vs_" + base: error,
                    }
                )
                if steps.get(label, 1) > 1:
                    rows[-1]["steps_per_call"] = steps[label]
                if label == "mamba-ssm" and pass_name in graph_failures:
                    rows[-1]["cuda_graph_failure"] = graph_failures[pass_name]
                if pass_name == "forward+backward" and label in kernels:
                    rows[-1]["kernel_us"] = kernels[label]
                    rows[-1]["kernel_sum_us"] = round(sum(kernels[label].values()), 1)
                    if label in gaps:
                        rows[-1]["gpu_idle_us"] = gaps[label]
    if torch_profiles:
        # torch's profiler keeps CUPTI subscribed once used and JAX's tracer then sees nothing: torch's traces last
        from torch_reference.kernel_calls import profiled_kernel_us

        for shape_name, forward_backward in torch_profiles.items():
            kernels = profiled_kernel_us(forward_backward)
            for row in rows:
                if (row["shape"], row["impl"], row["pass"]) == (shape_name, "mamba-ssm", "forward+backward"):
                    row["kernel_us"] = kernels
                    row["kernel_sum_us"] = round(sum(kernels.values()), 1)
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        f"# Kernel benchmark: {meta['op']} on {meta['device']['device']}",
        "",
        f"`{meta['command']}` ({meta['date']}). Copy bandwidth measured in the run: {meta['copy_gbs']:.0f} GB/s; "
        f"SFU exp2 rate: {meta['exp_per_s'] / 1e12:.2f} T/s ({meta['device']['sm_count']} SMs x "
        f"{SFU_EXP2_PER_CLOCK_PER_SM}/clk x {meta['device']['sm_clock_mhz']} MHz); bf16 matmul rate measured in the "
        f"run: {meta['matmul_tflops']:.0f} TFLOP/s.",
        "",
        "| shape | pass | impl | ms | speed-up vs mamba-ssm's fastest | eff. GB/s | TFLOP/s | floor ms | x floor "
        "| saved MiB | out rel L2 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    looped = sorted({r["steps_per_call"] for r in rows if "steps_per_call" in r})
    if looped:
        note = (
            f"A decoding step's ms is one step's share of calls of {', '.join(map(str, looped))} steps, each step on "
            "inputs of its own and the states the step before returned: ours one jit-compiled loop, mamba-ssm's a "
            "Python loop (eager) or one CUDA graph of all of them (replayed)."
        )
        lines[4:4] = [note, ""]
    for r in rows:
        err = next((v for k, v in r.items() if k.startswith("out_rel_l2")), None)
        speed = "" if r["speedup_vs_mamba_ssm"] is None else f"{r['speedup_vs_mamba_ssm']:.2f}x"
        speed += " (graph)" if r.get("mamba_ssm_fastest") == TORCH_GRAPHED else ""
        lines.append(
            f"| {r['shape']} | {r['pass']} | {r['impl']} | {r['ms']:.3f} | {speed} | {r['effective_gbs']:.0f} | "
            f"{r['tflops']:.1f} | "
            f"{r['floor_ms']:.3f} | {r['times_floor']:.1f} | {'' if r.get('saved_mb') is None else r['saved_mb']} | "
            f"{'' if err is None else f'{err:.1e}'} |"
        )
    uncaptured = [r for r in rows if r.get("cuda_graph_failure")]
    if uncaptured:
        lines += [
            "",
            "mamba-ssm passes that could not be captured as a CUDA graph (their eager figure is its best):",
            "",
        ]
        lines += [f"- {r['shape']} {r['pass']}: {r['cuda_graph_failure']}" for r in uncaptured]
    profiled = [r for r in rows if r.get("kernel_us")]
    if profiled:
        lines += ["", "Per-kernel device time of the forward+backward (us per call, from the profiler):", ""]
        for r in profiled:
            top = ", ".join(f"{name} {us:.0f}" for name, us in list(r["kernel_us"].items())[:8])
            lines.append(f"- {r['shape']} {r['impl']} (kernels' sum {r['kernel_sum_us']:.0f}): {top}")
            idle = r.get("gpu_idle_us")
            if idle:
                before = ", ".join(f"{name} {us:.0f}" for name, us in idle["idle_before"].items())
                lines.append(
                    f"  - traced span {idle['span']:.0f}, kernels {idle['kernels']:.0f}, GPU busy {idle['busy']:.0f}; "
                    f"idle before: {before}"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.kernels", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--op", choices=list(OPS), default="selective_scan")
    parser.add_argument("--shapes", nargs="+", help="shape names of the op (default: all of them)")
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=V,V,...",
        help="an extra shape, the op's fields in order (selective_scan: batch,L,dim,N,G), e.g. b1=1,4096,768,16,1; "
        "timed besides the --shapes ones",
    )
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    parser.add_argument(
        "--impls",
        nargs="*",
        choices=["pallas", "reference", *REGISTERED_IMPLS],
        default=None,
        help="default: the op's kernels; mamba_ssm_triton (--op ssd): mamba-ssm's own Triton kernels launched from JAX",
    )
    parser.add_argument(
        "--pallas-config",
        action="append",
        default=[],
        help="extra tiling, e.g. block_d=64,num_warps=2 (over each shape's default config where the op has one)",
    )
    parser.add_argument("--torch", action=argparse.BooleanOptionalAction, default=True, help="time mamba-ssm too")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument(
        "--sample-ms",
        type=float,
        default=SAMPLE_MS,
        help="each of the --reps samples times back-to-back calls (at most 200) filling this many ms, then one sync",
    )
    parser.add_argument(
        "--profile", action="store_true", help="also record each side's per-kernel times (forward+backward)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output prefix (default benchmarks/kernels/<device>/<op>, e.g. h200/ssd: the current result's place)",
    )
    args = parser.parse_args(argv)
    extras = parse_shapes(args.shape, OPS[args.op])
    op = dataclasses.replace(OPS[args.op], shapes={**OPS[args.op].shapes, **extras})
    args.shapes = shapes_to_run(args.shapes, extras, op)
    unknown = [name for name in args.shapes if name not in op.shapes]
    if unknown:
        raise SystemExit(f"--shapes: unknown {unknown} for --op {args.op}; known: {list(op.shapes)}")
    if jax.default_backend() != "gpu":
        raise SystemExit("compare.kernels times GPU kernels: JAX sees no GPU")

    args.impls = list(op.impls) if args.impls is None else args.impls
    for impl in args.impls:
        if impl in REGISTERED_IMPLS and REGISTERED_IMPLS[impl] != args.op:
            raise SystemExit(f"--impls {impl} serves --op {REGISTERED_IMPLS[impl]} only, not {args.op}")
    if "mamba_ssm_triton" in args.impls:
        import torch_reference.ssd_jax_triton  # noqa: F401  (registers the impl)
    variants = [Variant(impl, impl) for impl in args.impls] + [parse_config(c, op) for c in args.pallas_config]
    info = device_info()
    copy_gbs = copy_bandwidth_gbs(args.reps)
    exp_per_s = (info["sm_count"] or 0) * SFU_EXP2_PER_CLOCK_PER_SM * (info["sm_clock_mhz"] or 0) * 1e6
    tflops = matmul_tflops(args.reps)
    ceiling = {"copy_gbs": copy_gbs, "exp_per_s": exp_per_s, "matmul_tflops": tflops}
    rows = run_op(op, args, variants, ceiling)
    meta = {
        "op": args.op,
        "command": "python -m compare.kernels " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "device": info,
        "copy_gbs": round(copy_gbs, 1),
        "exp_per_s": exp_per_s,
        "matmul_tflops": round(tflops, 1),
        "jax": jax.__version__,
    }
    out = args.out or Path("benchmarks/kernels") / device_folder(info["device"]) / args.op
    out.parent.mkdir(parents=True, exist_ok=True)
    output_path(out, ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    table = markdown(rows, meta)
    output_path(out, ".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
