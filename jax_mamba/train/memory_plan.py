"""Will a config fit? ``python -m jax_mamba.train.memory_plan --config NAME [--steps N] [--key=value ...]``.

Builds the run's mesh, parameters and optimizer state as training does (``init_training``), compiles its train step
for the run's batch shape and prints a JSON line: the bytes each device holds after initialization (and its peak
while initializing, on GPUs) and XLA's plan for the compiled step (arguments, outputs, donated aliases, temporaries;
per device, GiB). With ``--steps N`` a second line gives the peak each device reached over N real steps. Nothing is
written to disk. For FSDP and other meshes this says where a device's memory goes before a long run finds out by
running out of it."""

import argparse
import collections
import json
import sys
from collections.abc import Callable

import jax
import numpy as np

from jax_mamba.configs.loader import ConfigError, load_config, parse_args_with_overrides
from jax_mamba.train.mesh_training import mesh_training

GIB = 2**30


def live_bytes_per_device() -> dict[str, float]:
    """GiB of live JAX arrays on each device (every shard counted where it lives)."""
    held: collections.Counter = collections.Counter()
    for array in jax.live_arrays():
        for shard in array.addressable_shards:
            held[str(shard.device)] += shard.data.nbytes
    return {device: round(size / GIB, 4) for device, size in sorted(held.items())}


def compiled_plan(compiled) -> dict[str, float] | None:
    """XLA's memory plan of a compiled executable (per device, GiB), with ``peak_estimate`` = arguments + outputs -
    donated aliases + temporaries; None where the backend does not report one."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes")
    plan = {name.removesuffix("_size_in_bytes"): getattr(stats, name) / GIB for name in fields}
    plan["peak_estimate"] = plan["argument"] + plan["output"] - plan["alias"] + plan["temp"]
    return {k: round(v, 4) for k, v in plan.items()}


def device_peaks() -> dict[str, float | None]:
    """Each local device's peak bytes in use so far (GiB; None where the backend keeps no statistics)."""
    peaks = {}
    for device in jax.local_devices():
        stats = device.memory_stats() or {}
        peak = stats.get("peak_bytes_in_use")
        peaks[str(device)] = None if peak is None else round(peak / GIB, 4)
    return peaks


def memory_plan(cfg, steps: int = 0, emit: Callable[[dict], None] = print) -> None:
    """``emit`` the report for ``cfg`` (see the module docstring): once after compiling the step, and with ``steps``
    once more after running them (so that a run out of memory still has its plan reported)."""
    with mesh_training(cfg) as (mesh, _, setup, batches):
        report: dict = {"config": cfg.name, "mesh": dict(mesh.shape), "batch_size": cfg.train.batch_size}
        report["parameters"] = int(sum(np.prod(p.shape) for p in setup.params.values()))
        report["after_init_gib"] = live_bytes_per_device()
        report["init_peak_gib"] = device_peaks()  # what initialization itself took at its highest
        batch = batches(0)
        args = (setup.params, setup.opt_state, setup.state, batch, np.int32(0))
        compiled = setup.train_step.lower(*args).compile()
        report["step_plan_gib"] = compiled_plan(compiled)
        emit(report)
        params, opt_state, state, out = setup.params, setup.opt_state, setup.state, None
        for step in range(steps):  # donated: each step's inputs are freed as it runs
            params, opt_state, state, out = compiled(params, opt_state, state, batch, np.int32(step))
        if out is not None:
            emit({"config": cfg.name, "steps": steps, "loss": float(out["loss"]), "peak_gib": device_peaks()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jax_mamba.train.memory_plan",
        description="Print where each device's memory goes in a config's training (after initialization, XLA's "
        "plan of the train step, and optionally the peak over a few real steps).",
        epilog="overrides as for python -m jax_mamba.train, e.g. --mesh.fsdp=2 --batch_size=4 --seq_len=2048",
    )
    parser.add_argument("--config", default="default", help="bundled config name or YAML path")
    parser.add_argument("--steps", type=int, default=0, help="run this many train steps and report the peaks")
    args, rest = parse_args_with_overrides(parser, argv)
    if args.steps < 0:
        parser.error(f"--steps must be >= 0, got {args.steps}")
    try:
        cfg = load_config(args.config, rest)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    memory_plan(cfg, args.steps, lambda report: print(json.dumps(report), flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
