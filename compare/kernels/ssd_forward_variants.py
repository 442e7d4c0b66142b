"""The seed paper's open question 3 (fusing dependent SSD kernels), answered by measurement:
``python -m compare.kernels.ssd_forward_variants [--shape 130m] [--torch] [--out DIR]``.

The chunked SSD forward at one ``compare.kernels.ops`` shape, several ways:
- ``fused``: our fused forward (one sequential kernel per batch row, head and head-dim block that keeps the running
  state in registers and stores no states);
- ``split``: a state pass storing every block's state, then a block-parallel output kernel with one short-lived
  program per (block, head, head-dim block) tile (``fused_forward_max_l=0``), the form of mamba-ssm's
  ``_chunk_scan_fwd`` that the paper found short-lived;
- with ``--torch``, ``mamba-ssm``: its five Triton kernels (cumsum, chunk state, state passing, C·Bᵀ, chunk scan),
  and ``mamba-ssm-from-jax``: the same five kernels launched by JAX through jax-triton
  (``torch_reference.ssd_jax_triton``), which separates what the kernels cost from what the framework adds.
Per variant: the median wall time per call (``compare.kernels.bench.median_ms``, outside any profiler), then Nsight
Compute's counters of every kernel of one warm call (DRAM bytes, L2 traffic, duration, waves, block lifetime).
Writes ``ssd-forward-variants.json`` and ``.md`` under ``--out``.
"""

import argparse
import datetime
import json
import sys
from pathlib import Path

import jax

from compare.characterize.counters import measure_ceilings
from compare.characterize.ncu import cuda_profiler_range, derived, profile_kernels
from compare.kernels.launches import name_every_launch
from compare.kernels.ops import OPS, Variant
from pallas_kernels.ssd.config import SsdConfig

MAMBA_SSM = "mamba-ssm"
MAMBA_SSM_FROM_JAX = "mamba-ssm-from-jax"
NAMES = ("fused", "split", MAMBA_SSM, MAMBA_SSM_FROM_JAX)


def pallas_variant(name: str) -> Variant:
    """Our forward as ``name`` says."""
    configs = {"fused": SsdConfig(), "split": SsdConfig(fused_forward_max_l=0)}
    return Variant(f"pallas {name}", "pallas", configs[name])


def forward_call(variant: str, shape_name: str):
    """(the forward of ``variant`` at the shape as a no-argument call, its sync)."""
    op = OPS["ssd"]
    shape = op.shapes[shape_name]
    arrays, dtypes, cotangent = op.inputs(shape, "bfloat16", 0)
    if variant == MAMBA_SSM:
        from torch_reference.backend import load

        calls = op.torch_calls(load("cuda", require_extensions=op.torch_extensions), arrays, dtypes, cotangent, shape)
        return calls.forward, calls.sync
    if variant == MAMBA_SSM_FROM_JAX:
        import torch_reference.ssd_jax_triton  # noqa: F401  (registers the impl)
        from pallas_kernels.ssd.api import MAMBA_SSM_TRITON

        forward = op.jax_calls(Variant(variant, MAMBA_SSM_TRITON), arrays, dtypes, cotangent, shape).forward
        return forward, jax.block_until_ready
    forward = op.jax_calls(pallas_variant(variant), arrays, dtypes, cotangent, shape).forward
    return forward, jax.block_until_ready


def run_target(variant: str, shape_name: str) -> None:
    """ncu's target: warm the forward, then one call inside the capture range."""
    forward, sync = forward_call(variant, shape_name)
    for _ in range(3):
        sync(forward())
    with cuda_profiler_range():  # the primary context, which PyTorch uses too
        sync(forward())


def measure(variant: str, shape_name: str, out: Path, reps: int, ceilings: dict) -> dict:
    from compare.kernels.bench import median_ms

    forward, sync = forward_call(variant, shape_name)
    ms = median_ms(forward, sync, reps)
    target = [sys.executable, "-m", "compare.kernels.ssd_forward_variants", "--target", variant, "--shape", shape_name]
    counters, meta = profile_kernels(target, None, 64, out / f"ncu-{variant}.ncu-rep")
    kernels = {name: derived(c, ceilings["copy_gbs"]) for name, c in counters.items()}
    total = lambda field: sum(k[field] * k["launches"] for k in kernels.values())  # noqa: E731
    return {
        "variant": variant,
        "wall_ms": ms,
        "kernel_us": total("us_per_launch"),
        "launches": sum(k["launches"] for k in kernels.values()),
        "dram_bytes": total("dram_bytes_per_launch"),
        "l2_bytes": sum(k.get("l2_bytes_per_launch", 0.0) * k["launches"] for k in kernels.values()),
        "kernels": kernels,
        "ncu_command": meta["command"],
    }


def totals_cells(variant: dict) -> str:
    """One variant's measured totals as table cells: wall ms, kernel us, launches, DRAM MB, L2 MB, DRAM GB/s."""
    us = variant["kernel_us"]
    gbs = variant["dram_bytes"] / (us * 1e-6) / 1e9 if us else 0.0
    return (
        f"{variant['wall_ms']:.3f} | {us:.1f} | {variant['launches']} | {variant['dram_bytes'] / 1e6:.1f} | "
        f"{variant['l2_bytes'] / 1e6:.1f} | {gbs:.0f}"
    )


def markdown(record: dict) -> str:
    lines = [
        f"# SSD forward variants ({record['shape']} shape {record['dims']}, bf16)",
        "",
        f"Command: `{record['command']}` on {record['device']}, {record['date']}. Copy ceiling measured in the run: "
        f"{record['ceilings']['copy_gbs']:.0f} GB/s.",
        "",
        "| variant | wall ms (median) | kernel us (ncu) | launches | DRAM MB | L2 MB | DRAM GB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {r['variant']} | {totals_cells(r)} |" for r in record["variants"]]
    lines += [
        "",
        "| variant | kernel | us/launch | DRAM MB/launch | L2 hit % | FLOP/byte | grid | waves | block life us |",
    ]
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in record["variants"]:
        for name, k in sorted(r["kernels"].items(), key=lambda kv: -kv[1]["us_per_launch"]):
            ai = k["arithmetic_intensity"]
            lines.append(
                f"| {r['variant']} | `{name[:60]}` | {k['us_per_launch']:.1f} | "
                f"{k['dram_bytes_per_launch'] / 1e6:.1f} | {k.get('l2_hit_pct', float('nan')):.1f} | "
                f"{'-' if ai is None else f'{ai:.2f}'} | {k.get('grid_size', 0):.0f} | {k.get('waves', 0):.2f} | "
                f"{k.get('block_lifetime_us', 0):.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.kernels.ssd_forward_variants", description=__doc__)
    parser.add_argument("--shape", default="130m", choices=sorted(OPS["ssd"].shapes))
    parser.add_argument(
        "--torch", action="store_true", help="also mamba-ssm's forward (its five kernels), from PyTorch and from JAX"
    )
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("reports/questions"))
    parser.add_argument("--target", choices=NAMES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    name_every_launch()
    if args.target:
        run_target(args.target, args.shape)
        return 0
    if jax.default_backend() != "gpu":
        raise SystemExit("compare.kernels.ssd_forward_variants measures GPU kernels: JAX sees no GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    ceilings = measure_ceilings()
    variants = [*NAMES[:2], *([MAMBA_SSM, MAMBA_SSM_FROM_JAX] if args.torch else [])]
    record = {
        "command": "python -m compare.kernels.ssd_forward_variants "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "device": jax.devices()[0].device_kind,
        "date": datetime.date.today().isoformat(),
        "shape": args.shape,
        "dims": dict(zip(OPS["ssd"].dim_names, OPS["ssd"].shapes[args.shape], strict=True)),
        "ceilings": ceilings,
        "variants": [],
    }
    for variant in variants:
        print(f"{variant} ...", flush=True)
        record["variants"].append(measure(variant, args.shape, args.out, args.reps, ceilings))
    (args.out / "ssd-forward-variants.json").write_text(json.dumps(record, indent=2))
    (args.out / "ssd-forward-variants.md").write_text(markdown(record))
    print(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
