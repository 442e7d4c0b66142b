"""Multi-GPU scaling, JAX beside PyTorch mamba-ssm: ``python -m compare.scaling --configs NAME ... --gpus 1 2 4
--mode fsdp|ddp|context [--torch] [--no-jax] --out PATH``.

For each config and device count n (the first n GPUs this process may use: of ``CUDA_VISIBLE_DEVICES`` where it is
set, so that runs on disjoint GPUs can go at once; on the CPU, n host devices):

- JAX trains in its own process (``python -m jax_mamba.train``, the loop's own tokens/s and peak memory) on the
  mesh of the mode: ``fsdp`` -> mesh 1 x n x 1 (parameters and AdamW state split over the n devices), ``ddp`` ->
  n x 1 x 1 (replicas), ``context`` -> 1 x 1 x n (each sequence's positions over the n devices; Mamba-2);
- with ``--torch``, the reference in one process per device under ``torchrun`` (``torch_reference.train_bench
  --parallel``): FSDP2 for ``fsdp``, DDP for ``ddp``, or what ``--torch_parallel`` names, so that each side may
  run its own best choice (e.g. our FSDP beside PyTorch's DDP); ``context`` has no mamba-ssm counterpart.

The batch per device is fixed (``--per_device_batch``; the global batch grows with n) except in ``context``, where
``--per_device_batch`` is the whole batch and n devices share its sequences. Scaling efficiency at n = tokens/s at n
/ (n x tokens/s at the smallest count run, scaled to one device). NCCL's NVLink multicast is off in both sides'
processes (``NCCL_NVLS_ENABLE=0`` unless set). Writes ``<out>.json`` and ``<out>.md``."""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from compare.outputs import output_path
from compare.throughput.steps import json_line, run_one
from jax_mamba.configs.loader import parse_args_with_overrides

MESH = {"fsdp": (1, "n", 1), "ddp": ("n", 1, 1), "context": (1, 1, "n")}
TORCH_PARALLEL = {"fsdp": "fsdp", "ddp": "ddp"}
NCCL_DEFAULTS = {"NCCL_NVLS_ENABLE": "0"}
# JAX and XLA settings recorded when set (PGLE: XLA's scheduler fed with the first steps' measured op times)
XLA_SETTINGS = (
    "XLA_FLAGS",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "JAX_ENABLE_PGLE",
    "JAX_PGLE_PROFILING_RUNS",
)
_PARENT_ONLY: dict[str, str] = {}  # set in this (driver) process only, so that it holds no GPU memory


def nccl_settings() -> dict[str, str]:
    """The NCCL settings both sides run under: ``NCCL_DEFAULTS`` unless set, and every other ``NCCL_*`` set."""
    return {**NCCL_DEFAULTS, **{k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}


def mesh_overrides(mode: str, n: int) -> list[str]:
    sizes = [n if s == "n" else s for s in MESH[mode]]
    return [f"--mesh.{axis}={size}" for axis, size in zip(("data", "fsdp", "context"), sizes, strict=True)]


def device_env(n: int, backend: str) -> dict:
    """This process's environment with the first ``n`` devices visible (GPUs) or ``n`` host devices (CPU)."""
    env = {k: v for k, v in os.environ.items() if k not in _PARENT_ONLY}
    env.update({k: os.environ.get(k, v) for k, v in NCCL_DEFAULTS.items()})
    if backend == "gpu":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), n))
    else:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}".strip()
        env["JAX_PLATFORMS"] = "cpu"
    return env


def visible_gpus(parent: str | None, n: int) -> list[str]:
    """The first ``n`` of the GPUs the parent may use (its ``CUDA_VISIBLE_DEVICES``, ids or UUIDs), else 0..n-1."""
    listed = [d.strip() for d in parent.split(",") if d.strip()] if parent else [str(i) for i in range(n)]
    if len(listed) < n:
        raise ValueError(f"--gpus {n} needs {n} GPUs; CUDA_VISIBLE_DEVICES={parent!r} lists {len(listed)}")
    return listed[:n]


def run_point(config: str, mode: str, n: int, args, extra: list[str], backend: str, workdir: Path) -> dict:
    """One config at n devices: the JAX side and (with --torch, modes with a counterpart) the reference."""
    batch = args.per_device_batch if mode == "context" else args.per_device_batch * n
    env = device_env(n, backend)
    point = {"config": config, "mode": mode, "devices": n, "batch_size": batch}
    sizes = (args.steps, batch, args.seq_len)
    if args.jax:
        point["jax"] = run_one(config, *sizes, [*extra, *mesh_overrides(mode, n)], workdir / f"{config}-{n}", env)
    parallel = torch_parallel(mode, args.torch_parallel)
    if args.torch and parallel:
        bench = ["-m", "torch_reference.train_bench", "--config", config, f"--steps={args.steps}"]
        bench += [f"--batch_size={batch}", f"--seq_len={args.seq_len}", *extra]
        bench += [f"--parallel={parallel}", f"--device={'cuda' if backend == 'gpu' else 'cpu'}"]
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}"]
        point["torch"] = json_line([*launcher, *bench], env)
    print(json.dumps(point), flush=True)
    return point


def torch_parallel(mode: str, chosen: str | None) -> str | None:
    """The reference's parallelism beside ``mode``: ``chosen`` (``--torch_parallel``) where given, else the mode's
    counterpart; None for ``context``, which has none."""
    return None if mode not in TORCH_PARALLEL else chosen or TORCH_PARALLEL[mode]


def efficiencies(points: list[dict], side: str) -> dict[tuple[str, int], float]:
    """(config, devices) -> scaling efficiency of ``side`` against its smallest device count run, per device. A
    config run at one count of several devices has none (nothing to scale from)."""
    result = {}
    for config in {p["config"] for p in points}:
        done = sorted((p["devices"], p[side]["items_per_s"]) for p in points
                      if p["config"] == config and side in p and not p[side].get("returncode"))  # fmt: skip
        if not done or (len(done) == 1 and done[0][0] > 1):
            continue
        base_n, base_rate = done[0]
        for n, rate in done:
            result[config, n] = rate / (base_rate * n / base_n)
    return result


def write_report(out: Path, header: dict, points: list[dict]) -> list[str]:
    eff = {side: efficiencies(points, side) for side in ("jax", "torch")}
    lines = [
        f"# Multi-device scaling ({header['device']} x up to {max(header['devices'])}, {header['date']})",
        "",
        f"Mode `{header['mode']}`; {header['per_device_batch']} sequences of {header['seq_len']} per device "
        + ("(the whole batch: context parallel)" if header["mode"] == "context" else "(the global batch grows)")
        + f"; {header['steps']} steps, mean over the steps after the first three. Environment: {header['nccl']}"
        + (f", {header['xla']}" if header.get("xla") else "")
        + ". "
        f"PyTorch: {header.get('torch_settings') or 'not run'}.",
        f"Command: `{header['command']}`"
        if isinstance(header["command"], str)
        else "Commands:\n" + "\n".join(f"- `{c}`" for c in header["command"]),
        *([f"\n{header['note']}"] if header.get("note") else []),
        "",
        "| config | devices | batch | JAX tokens/s | JAX efficiency | JAX peak GiB | PyTorch tokens/s | "
        "PyTorch efficiency | PyTorch peak GiB | JAX / PyTorch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        key = (p["config"], p["devices"])
        cells = []
        for side in ("jax", "torch"):
            r = p.get(side)
            if r is None:
                cells += ["not run", "", ""]
            elif r.get("returncode"):
                cells += [f"failed (exit {r['returncode']})", "", ""]
            else:
                peak, share = r.get("peak_memory_gib"), eff[side].get(key)
                efficiency = "" if share is None else f"{share:.0%}"
                cells += [f"{r['items_per_s']:,.0f}", efficiency, f"{peak:.1f}" if peak else ""]
        ok = all(p.get(s) and not p[s].get("returncode") for s in ("jax", "torch"))
        ratio = f"{p['jax']['items_per_s'] / p['torch']['items_per_s']:.2f}x" if ok else ""
        lines.append(f"| {p['config']} | {p['devices']} | {p['batch_size']} | {' | '.join(cells)} | {ratio} |")
    output_path(out, ".md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.scaling", description=__doc__)
    parser.add_argument("--configs", nargs="+", required=True)
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2], help="device counts")
    parser.add_argument("--mode", choices=sorted(MESH), default="fsdp")
    parser.add_argument("--per_device_batch", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--torch", action="store_true", help="also the reference under torchrun (DDP or FSDP2)")
    parser.add_argument(
        "--torch_parallel",
        choices=sorted(set(TORCH_PARALLEL.values())),
        help="the reference's parallelism where it is not the mode's own (fsdp: FSDP2, ddp: DDP)",
    )
    parser.add_argument(
        "--jax", action=argparse.BooleanOptionalAction, default=True, help="--no-jax: the reference's side alone"
    )
    parser.add_argument("--out", required=True, help="output path without suffix (.json, .md)")
    args, extra = parse_args_with_overrides(parser, argv)
    if not (args.jax or args.torch):
        parser.error("--no-jax leaves nothing to run without --torch")
    if args.torch_parallel and not (args.torch and args.mode in TORCH_PARALLEL):
        parser.error(f"--torch_parallel needs --torch and a mode with a counterpart ({sorted(TORCH_PARALLEL)})")
    if any(n < 1 for n in args.gpus):
        parser.error(f"--gpus takes device counts >= 1, got {args.gpus}")
    if "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ:  # the driver only asks what devices there are
        _PARENT_ONLY["XLA_PYTHON_CLIENT_PREALLOCATE"] = os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import jax

    backend = "gpu" if jax.default_backend() in ("gpu", "cuda") else "cpu"
    device = jax.devices()[0]
    if backend == "gpu" and max(args.gpus) > jax.device_count():
        parser.error(f"--gpus {max(args.gpus)} needs that many GPUs; {jax.device_count()} are present")
    header = {
        "device": getattr(device, "device_kind", str(device)),
        "devices": args.gpus,
        "mode": args.mode,
        "torch_parallel": torch_parallel(args.mode, args.torch_parallel) if args.torch else None,
        "per_device_batch": args.per_device_batch,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "date": time.strftime("%Y-%m-%d"),
        "nccl": ", ".join(f"{k}={v}" for k, v in sorted(nccl_settings().items())),
        "xla": ", ".join(f"{k}={os.environ[k]}" for k in XLA_SETTINGS if k in os.environ and k not in _PARENT_ONLY),
        "command": " ".join(["python -m compare.scaling", *(argv if argv is not None else sys.argv[1:])]),
    }
    del device
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            for n in sorted(args.gpus):
                points.append(run_point(config, args.mode, n, args, extra, backend, Path(tmp)))
    header["torch_settings"] = next((p["torch"]["settings"] for p in points if "settings" in p.get("torch", {})), None)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_path(out, ".json").write_text(json.dumps({**header, "points": points}, indent=2))
    print("\n".join(write_report(out, header, points)))
    failed = [p for p in points if any(p[s].get("returncode") for s in ("jax", "torch") if s in p)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
