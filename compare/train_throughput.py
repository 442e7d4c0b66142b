"""Whole-training-step throughput of the JAX models: ``python -m compare.train_throughput``.

Each config trains in a fresh process (``python -m jax_mamba.train``) for ``--steps`` steps; the numbers are the
loop's own: mean tokens/s over the steps after the first (compilation excluded) and the device's peak memory in use.
Other ``--key=value`` arguments are config overrides applied to every config. Writes ``<out>.json`` and
``<out>.md``."""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

from jax_mamba.configs.loader import parse_args_with_overrides


def run_one(config: str, steps: int, batch_size: int, seq_len: int, extra: list[str], workdir: Path) -> dict:
    run_dir = workdir / config
    command = [
        sys.executable,
        "-m",
        "jax_mamba.train",
        "--config",
        config,
        f"--run_dir={run_dir}",
        f"--max_steps={steps}",
        f"--batch_size={batch_size}",
        f"--seq_len={seq_len}",
        "--eval_batches=1",
        f"--eval_every={steps}",
        f"--save_every={steps}",
        "--log_every=10",
        "--progress=false",
        *extra,
    ]
    began = time.time()
    proc = subprocess.run(command, capture_output=True, text=True)
    result = {
        "config": config,
        "command": " ".join(command[1:]),
        "returncode": proc.returncode,
        "wall_s": round(time.time() - began, 1),
    }
    if proc.returncode != 0:
        result["error"] = proc.stderr[-2000:]
        return result
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    end = next(r for r in reversed(records) if r.get("event") == "end")
    info = json.loads((run_dir / "run.json").read_text())
    result.update(
        tokens_per_s=end["tokens_per_s_mean"],
        peak_memory_gib=(end["peak_memory_bytes"] or 0) / 2**30,
        traces=end["traces"],
        parameters=info["parameters"],
        compute_dtype=info["compute_dtype"],
        final_loss=next(r["loss"] for r in reversed(records) if "loss" in r and "event" not in r),
    )
    return result


def run_torch(config: str, steps: int, batch_size: int, seq_len: int, extra: list[str]) -> dict:
    """mamba-ssm on the same config and batches, in its own process (torch_reference.train_bench)."""
    command = [
        sys.executable,
        "-m",
        "torch_reference.train_bench",
        "--config",
        config,
        f"--steps={steps}",
        f"--batch_size={batch_size}",
        f"--seq_len={seq_len}",
        *extra,
    ]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"returncode": proc.returncode, "error": proc.stderr[-2000:]}
    return {"returncode": 0, **json.loads(proc.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=["mamba1-130m", "mamba2-130m"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--out", required=True, help="output path without suffix (writes .json and .md)")
    parser.add_argument(
        "--torch",
        action="store_true",
        help="also time mamba-ssm on the same configs (needs a GPU and python -m torch_reference.build)",
    )
    args, extra = parse_args_with_overrides(parser, argv)  # extra: overrides for every config
    device = jax.devices()[0]
    header = {
        "device": getattr(device, "device_kind", str(device)),
        "backend": jax.default_backend(),
        "jax": jax.__version__,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "date": time.strftime("%Y-%m-%d"),
        "overrides": extra,
    }
    del device
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            row = run_one(config, args.steps, args.batch_size, args.seq_len, extra, Path(tmp))
            if args.torch:
                row["torch"] = run_torch(config, args.steps, args.batch_size, args.seq_len, extra)
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({**header, "runs": rows}, indent=2))
    lines = [
        f"# Training throughput ({header['device']}, {header['date']})",
        "",
        f"jax {header['jax']}, batch {args.batch_size} x length {args.seq_len}, {args.steps} steps "
        f"(mean over steps 2..N), overrides {extra or 'none'}.",
        "",
        "| config | params | compute | tokens/s | peak memory (GiB) | final loss "
        "| mamba-ssm tokens/s | mamba-ssm peak (GiB) | JAX / mamba-ssm |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["returncode"]:
            lines.append(f"| {r['config']} | failed (exit {r['returncode']}) | | | | | | | |")
            continue
        ours = (
            f"| {r['config']} | {r['parameters'] / 1e6:.1f}M | {r['compute_dtype']} | {r['tokens_per_s']:,.0f} "
            f"| {r['peak_memory_gib']:.1f} | {r['final_loss']:.3f} "
        )
        t = r.get("torch")
        if t is None:
            theirs = "| not run | | |"
        elif t["returncode"]:
            theirs = f"| failed (exit {t['returncode']}) | | |"
        else:
            theirs = (
                f"| {t['tokens_per_s']:,.0f} | {t['peak_memory_gib']:.1f} "
                f"| {r['tokens_per_s'] / t['tokens_per_s']:.2f}x |"
            )
        lines.append(ours + theirs)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["returncode"] == 0 and r.get("torch", {}).get("returncode", 0) == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
