"""Where a Graph-Mamba training step's time goes: ``python -m compare.characterize.graph_profile --config NAME``.

Runs the loop's own jit train step on the config's batches (of its most common planned shape) under
``jax.profiler.trace`` and sums the device time of every kernel by the model part its op belongs to, read from the
name scope in the compiled step's HLO metadata of the kernel's fusion (Pallas kernels by their names): the local
GatedGCN (message passing), the global branch's degree ordering and dense packing, the Mamba itself (the selective
scan and its projections and conv), BatchNorm, the FFN, the encoders and head, and the rest (optimizer update,
loss). Also reports how much of each batch is padding: nodes, edges and dense Mamba slots (B x M) that are not
real. Prints a table, writes JSON with ``--out``."""

import argparse
import collections
import json
import sys
from pathlib import Path

import jax

from compare.characterize.step_profile import common_shape_batches, profile_steps
from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.tasks import task_for
from jax_mamba.train.step import init_training

# (part, scope fragment): the first fragment found in a kernel's op name scope names its part
PARTS = (
    ("ordering + dense packing", "order_pack"),
    ("Mamba (global)", "global_mamba/mamba"),
    ("BatchNorm", "batch_norm"),
    ("GatedGCN (message passing)", "gated_gcn"),
    ("FFN", "ffn"),
    ("encoders", "encoder"),
    ("head + pooling", "head"),
)
OTHER = "optimizer, loss, other"


def part_of(scope: str) -> str:
    return next((part for part, fragment in PARTS if fragment in scope), OTHER)


KERNEL_PARTS = (("Mamba (global)", "selective_scan"),)  # Pallas kernels, named by pallas_call(name=)


def kernel_part(kernel: str, scopes: dict[str, str]) -> str:
    for part, fragment in KERNEL_PARTS:
        if fragment in kernel:
            return part
    return part_of(scopes.get(kernel, scopes.get(kernel.split(".")[0], "")))


def padding_stats(batches: list[dict]) -> dict[str, float]:
    """Real share of the padded nodes, edges and dense Mamba slots over ``batches`` (each with leading accum axis)."""
    real_nodes = sum(float(b["node_mask"].sum()) for b in batches)
    nodes = sum(b["node_mask"].size for b in batches)
    real_edges = sum(float(b["edge_mask"].sum()) for b in batches)
    edges = sum(b["edge_mask"].size for b in batches)
    slots = sum(b["slots"].size for b in batches)
    return {
        "real_node_share": real_nodes / nodes,
        "real_edge_share": real_edges / edges,
        "real_slot_share": real_nodes / slots,
        "shapes": sorted({(b["node_mask"].shape[-1], b["edge_mask"].shape[-1], b["slots"].shape[-1]) for b in batches}),
    }


def measure(config: str, overrides: list[str], steps: int, shape_steps: int) -> dict:
    cfg = load_config(config, overrides)
    task = task_for(cfg)
    dataset = task.make_dataset()
    setup = init_training(cfg, task)
    batches = [dataset.train_batch(s, cfg.train.grad_accum_steps) for s in range(shape_steps)]  # shapes, padding
    on_device = common_shape_batches(batches, steps)
    profile = profile_steps(setup, on_device)
    by_kernel, scopes = profile.kernel_us, profile.scopes
    by_part: dict[str, float] = collections.defaultdict(float)
    for kernel, us in by_kernel.items():
        by_part[kernel_part(kernel, scopes)] += us
    device_us = sum(by_part.values())
    return {
        "config": config,
        "device": getattr(jax.devices()[0], "device_kind", str(jax.devices()[0])),
        "overrides": overrides,
        "steps_profiled": len(on_device),
        "profiled_shape": {
            "nodes": int(on_device[0]["node_mask"].shape[-1]),
            "edges": int(on_device[0]["edge_mask"].shape[-1]),
        },
        "step_wall_ms": profile.step_wall_ms,
        "device_busy_ms": device_us / 1e3,
        "parts_ms": {k: v / 1e3 for k, v in sorted(by_part.items(), key=lambda kv: -kv[1])},
        "top_kernels_us": dict(list(by_kernel.items())[:25]),
        "padding": padding_stats(batches),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.characterize.graph_profile", description=__doc__)
    parser.add_argument("--config", default="graph-mamba-peptides-func")
    parser.add_argument("--steps", type=int, default=8, help="training steps profiled (after compiling their shapes)")
    parser.add_argument("--shape_steps", type=int, default=40, help="steps whose batches the padding shares cover")
    parser.add_argument("--out", type=Path)
    args, overrides = parse_args_with_overrides(parser, argv)
    result = measure(args.config, overrides, args.steps, max(args.shape_steps, args.steps))
    total = result["device_busy_ms"]
    print(f"{result['config']} on {result['device']}: {result['step_wall_ms']:.2f} ms/step, device busy {total:.2f}")
    for part, ms in result["parts_ms"].items():
        print(f"  {part:30s} {ms:8.3f} ms  {100 * ms / max(total, 1e-9):5.1f}%")
    pad = result["padding"]
    print(
        f"  real share of padded nodes {pad['real_node_share']:.0%}, edges {pad['real_edge_share']:.0%}, "
        f"dense Mamba slots {pad['real_slot_share']:.0%}; shapes (N, E, M): {pad['shapes']}"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
