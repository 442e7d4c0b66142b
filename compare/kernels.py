"""Kernel benchmarks, ours against mamba-ssm's side by side in one process: ``python -m compare.kernels``.

For each shape it times the forward and the forward+backward of every JAX impl (``--impls``, plus any
``--pallas-config`` tiling variants) and of mamba-ssm's kernel (``--torch``) on the same input values, each in its
native layout. A time is the median over ``--reps`` repetitions of ``back-to-back calls / count`` after warm-up
(compilation and autotuning excluded). Also printed: speed-up over mamba-ssm, effective bandwidth (compulsory bytes
/ time) and the floor: max(compulsory bytes / measured copy bandwidth, exps / SFU rate); the forward+backward
floor counts the decays exp(dt A) twice (forward and its recomputation, as nothing (L, dim, N) is stored).
Writes ``<out>.json`` and ``<out>.md``.
"""

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from compare.tolerances import rel_l2
from pallas_kernels import selective_scan_fn
from pallas_kernels.selective_scan.config import ScanConfig

SHAPES = {  # name: (batch, L, dim, N, G)
    "130m": (8, 2048, 1536, 16, 1),
    "1.4b": (4, 2048, 4096, 16, 1),
    "long": (1, 16384, 1536, 16, 1),
}
SFU_EXP2_PER_CLOCK_PER_SM = 16


def median_ms(fn: Callable[[], object], sync: Callable[[object], None], reps: int, target_ms: float = 25.0) -> float:
    """Median over ``reps`` of the mean time of back-to-back calls, after warm-up, in ms."""
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


def time_passes(forward, forward_backward, sync, reps: int) -> dict[str, float]:
    """ms of the forward and of the forward+backward, each by ``median_ms``."""
    return {"forward": median_ms(forward, sync, reps), "forward+backward": median_ms(forward_backward, sync, reps)}


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


def selective_scan_inputs(shape, dtype: str, seed: int) -> tuple[dict, dict, np.ndarray]:
    """Model-like values, float32 numpy rounded to the dtypes they will have: (arrays, dtypes, out cotangent)."""
    batch, seqlen, dim, dstate, groups = shape
    rng = np.random.default_rng(seed)
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), dim))
    arrays = {
        "u": rng.normal(size=(batch, seqlen, dim)),
        "delta": rng.normal(0.0, 0.5, (batch, seqlen, dim)),
        "A": -np.tile(np.arange(1, dstate + 1, dtype=np.float64), (dim, 1)),
        "B": rng.normal(size=(batch, seqlen, groups, dstate)),
        "C": rng.normal(size=(batch, seqlen, groups, dstate)),
        "D": np.ones(dim),
        "z": rng.normal(size=(batch, seqlen, dim)),
        "delta_bias": dt + np.log(-np.expm1(-dt)),
    }
    dtypes = {k: dtype for k in ("u", "delta", "B", "C", "z")} | {k: "float32" for k in ("A", "D", "delta_bias")}
    arrays = {k: np.asarray(jnp.asarray(v, dtypes[k]).astype(jnp.float32)) for k, v in arrays.items()}
    cotangent = np.asarray(jnp.asarray(rng.normal(size=(batch, seqlen, dim)), dtype).astype(jnp.float32))
    return arrays, dtypes, cotangent


def selective_scan_costs(shape, dtype: str) -> dict:
    """Compulsory HBM bytes (inputs read once, outputs written once) and exps, forward and forward+backward."""
    batch, seqlen, dim, dstate, groups = shape
    item = jnp.dtype(dtype).itemsize
    act = batch * seqlen * dim * item  # one of u, delta, z, out, dout, du, ddelta, dz
    bc = batch * seqlen * groups * dstate * item  # one of B, C, dB, dC
    params = dim * dstate * 4 + 2 * dim * 4
    exps = batch * seqlen * dim * dstate
    return {
        "forward": {"bytes": 4 * act + 2 * bc + params, "exps": exps},
        "forward+backward": {"bytes": (4 * act + 2 * bc) + (7 * act + 4 * bc) + 3 * params, "exps": 2 * exps},
    }


@dataclasses.dataclass
class Variant:
    label: str
    impl: str
    config: ScanConfig | None = None


def parse_config(text: str) -> Variant:
    """'block_d=32,num_warps=1,...' -> a pallas variant labelled by the text."""
    fields = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key not in {f.name for f in dataclasses.fields(ScanConfig)}:
            raise SystemExit(
                f"--pallas-config: unknown field {key!r}; fields: {[f.name for f in dataclasses.fields(ScanConfig)]}"
            )
        fields[key] = int(value)
    config = ScanConfig(**fields)
    config.validate()
    return Variant(f"pallas[{text}]", "pallas", config)


def jax_selective_scan_calls(variant: Variant, arrays: dict, dtypes: dict, cotangent: np.ndarray):
    names = list(arrays)
    inputs = [jnp.asarray(arrays[k], dtypes[k]) for k in names]
    dout = jnp.asarray(cotangent, dtypes["u"])

    def scan(*xs):
        kw = dict(zip(names, xs, strict=True))
        return selective_scan_fn(**kw, delta_softplus=True, impl=variant.impl, config=variant.config)

    forward = jax.jit(scan)
    forward_backward = jax.jit(lambda *xs: jax.vjp(scan, *xs)[1](dout))
    output = np.asarray(forward(*inputs).astype(jnp.float32))
    return (lambda: forward(*inputs)), (lambda: forward_backward(*inputs)), output


def run_selective_scan(args, variants: list[Variant], ceiling: dict) -> list[dict]:
    rows = []
    torch_ref = None
    if args.torch:
        from torch_reference.backend import load
        from torch_reference.kernel_calls import selective_scan_calls

        torch_ref = load("cuda")
    for shape_name in args.shapes:
        shape = SHAPES[shape_name]
        arrays, dtypes, cotangent = selective_scan_inputs(shape, args.dtype, args.seed)
        costs = selective_scan_costs(shape, args.dtype)
        timed = {}
        outputs = {}
        if torch_ref is not None:
            calls = selective_scan_calls(torch_ref, arrays, dtypes, cotangent, delta_softplus=True)
            outputs["mamba-ssm"] = calls.output
            timed["mamba-ssm"] = time_passes(calls.forward, calls.forward_backward, calls.sync, args.reps)
            print(f"{shape_name} mamba-ssm: {timed['mamba-ssm']}", flush=True)
        for variant in variants:
            forward, forward_backward, outputs[variant.label] = jax_selective_scan_calls(
                variant, arrays, dtypes, cotangent
            )
            timed[variant.label] = time_passes(forward, forward_backward, jax_sync, args.reps)
            print(f"{shape_name} {variant.label}: {timed[variant.label]}", flush=True)
        base = "mamba-ssm" if "mamba-ssm" in outputs else variants[0].label
        for label, passes in timed.items():
            error = None if label == base else float(rel_l2(outputs[label], outputs[base]))
            for pass_name, ms in passes.items():
                cost = costs[pass_name]
                floor_ms = max(
                    cost["bytes"] / (ceiling["copy_gbs"] * 1e9) * 1e3,
                    cost["exps"] / ceiling["exp_per_s"] * 1e3 if ceiling["exp_per_s"] else 0.0,
                )
                ref_ms = timed.get("mamba-ssm", {}).get(pass_name)
                rows.append(
                    {
                        "op": "selective_scan",
                        "shape": shape_name,
                        "dims": dict(zip(("batch", "L", "dim", "N", "G"), shape, strict=True)),
                        "dtype": args.dtype,
                        "impl": label,
                        "pass": pass_name,
                        "ms": round(ms, 4),
                        "speedup_vs_mamba_ssm": None if ref_ms is None else round(ref_ms / ms, 3),
                        "effective_gbs": round(cost["bytes"] / (ms * 1e-3) / 1e9, 1),
                        "floor_ms": round(floor_ms, 4),
                        "times_floor": round(ms / floor_ms, 2),
                        "out_rel_l2_vs_" + base: error,
                    }
                )
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        f"# Kernel benchmark: {meta['op']} on {meta['device']['device']}",
        "",
        f"`{meta['command']}` ({meta['date']}). Copy bandwidth measured in the run: {meta['copy_gbs']:.0f} GB/s; "
        f"SFU exp2 rate: {meta['exp_per_s'] / 1e12:.2f} T/s ({meta['device']['sm_count']} SMs x "
        f"{SFU_EXP2_PER_CLOCK_PER_SM}/clk x {meta['device']['sm_clock_mhz']} MHz).",
        "",
        "| shape | pass | impl | ms | speed-up vs mamba-ssm | eff. GB/s | floor ms | x floor | out rel L2 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        err = next((v for k, v in r.items() if k.startswith("out_rel_l2")), None)
        speed = "" if r["speedup_vs_mamba_ssm"] is None else f"{r['speedup_vs_mamba_ssm']:.2f}x"
        lines.append(
            f"| {r['shape']} | {r['pass']} | {r['impl']} | {r['ms']:.3f} | {speed} | {r['effective_gbs']:.0f} | "
            f"{r['floor_ms']:.3f} | {r['times_floor']:.1f} | {'' if err is None else f'{err:.1e}'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", choices=["selective_scan"], default="selective_scan")
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    parser.add_argument("--impls", nargs="*", choices=["pallas", "reference"], default=["pallas"])
    parser.add_argument(
        "--pallas-config", action="append", default=[], help="extra tiling, e.g. block_d=64,num_warps=2"
    )
    parser.add_argument("--torch", action=argparse.BooleanOptionalAction, default=True, help="time mamba-ssm too")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="output prefix (default benchmarks/kernels/<op>)")
    args = parser.parse_args(argv)
    if jax.default_backend() != "gpu":
        raise SystemExit("compare.kernels times GPU kernels: JAX sees no GPU")

    variants = [Variant(impl, impl) for impl in args.impls] + [parse_config(c) for c in args.pallas_config]
    info = device_info()
    copy_gbs = copy_bandwidth_gbs(args.reps)
    exp_per_s = (info["sm_count"] or 0) * SFU_EXP2_PER_CLOCK_PER_SM * (info["sm_clock_mhz"] or 0) * 1e6
    ceiling = {"copy_gbs": copy_gbs, "exp_per_s": exp_per_s}
    rows = run_selective_scan(args, variants, ceiling)
    meta = {
        "op": args.op,
        "command": "python -m compare.kernels " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "device": info,
        "copy_gbs": round(copy_gbs, 1),
        "exp_per_s": exp_per_s,
        "jax": jax.__version__,
    }
    out = args.out or Path("benchmarks/kernels") / args.op
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    table = markdown(rows, meta)
    out.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
