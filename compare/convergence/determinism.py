"""Is a training step's gradient the same from one computation to the next?
``python -m compare.convergence.determinism``.

Computes the gradient of one batch (step ``--step``'s batch of the config's data, from seed ``train.seed``'s initial
weights) ``--repeats`` times in one process: our jit-compiled gradient (``--framework jax``, on JAX's default device)
or the reference's (``--framework torch``: ``torch_reference.gradient_repeats`` in a subprocess, mamba-ssm's fused
kernels). Reports every parameter whose gradient is not bitwise the same each time, with the largest difference
relative to the gradient's norm: in a network's backward an order-dependent sum changes its own parameter's gradient
and everything the backward reaches after it, so the last layer (in the backward's order) whose gradients differ
locates it. Writes ``<out>.json`` with a digest of every parameter's first gradient; ``--against FILE`` compares
those digests with another process's file of the same framework (a difference between processes that repeats within
one process do not show comes from a choice made per process, such as an autotuned algorithm). Other ``--key=value``
arguments override the config.
"""

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from compare.outputs import output_path
from jax_mamba.configs.loader import load_config, parse_args_with_overrides


def repeat_differences(repeats: list[dict[str, np.ndarray]]) -> dict[str, dict]:
    """{parameter: digest of its first gradient, largest |difference| to it over the other repeats (absolute and
    relative to its norm), whether all repeats are bitwise the same}."""
    report = {}
    for name, first in repeats[0].items():
        first64 = first.astype(np.float64)
        diff = max((float(np.max(np.abs(r[name] - first64), initial=0.0)) for r in repeats[1:]), default=0.0)
        norm = float(np.linalg.norm(first64))
        report[name] = {
            "digest": hashlib.sha1(np.ascontiguousarray(first).tobytes()).hexdigest()[:16],
            "max_abs_diff": diff,
            "max_rel_diff": diff / norm if norm else diff,
            "bitwise_same": all(np.array_equal(r[name], first) for r in repeats[1:]),
        }
    return report


def jax_repeats(config: str, overrides: list[str], repeats: int, step: int) -> tuple[dict, list[dict]]:
    """Our gradient of step ``step``'s batch, ``repeats`` times: (what ran, [{parameter: float32 gradient}])."""
    import jax

    from jax_mamba.tasks import task_for
    from jax_mamba.train.step import initial_variables, make_grad_fn, training_key

    cfg = load_config(config, overrides)
    task = task_for(cfg)
    layout, params, state, _, _ = initial_variables(cfg, task)
    micro = jax.tree.map(lambda x: x[0], task.make_dataset().train_batch(step, 1))
    grad_fn = jax.jit(make_grad_fn(task, layout))
    key = training_key(cfg.train.seed, step, 0)
    losses, grads = [], []
    for _ in range(repeats):
        (loss_sum, (sums, _)), g = grad_fn(params, state, micro, key)
        losses.append(float(loss_sum / sums["count"]))
        grads.append({k: np.asarray(v, np.float32) for k, v in g.items()})
    device = jax.devices()[0]
    return {"framework": "jax", "jax": jax.__version__, "device": getattr(device, "device_kind", str(device)),
            "losses": losses}, grads  # fmt: skip


def torch_repeats(config: str, overrides: list[str], repeats: int, step: int, device: str) -> tuple[dict, list]:
    """The reference's gradient, ``repeats`` times (``torch_reference.gradient_repeats`` in a subprocess)."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable, "-m", "torch_reference.gradient_repeats", "--config", config, f"--repeats={repeats}",
            f"--step={step}", f"--out_dir={tmp}", f"--device={device}", *overrides,
        ]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"the reference's gradients failed:\n{proc.stderr[-3000:]}")
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        grads = [dict(np.load(Path(tmp) / f"repeat-{r}.npz")) for r in range(repeats)]
    return info, grads


def against(report: dict[str, dict], other: dict[str, dict]) -> list[str]:
    """Parameters whose first gradients' digests differ between two files (both must name the same parameters)."""
    if set(report) != set(other):
        raise SystemExit("--against: the two files name different parameters (another config or framework?)")
    return [name for name in report if report[name]["digest"] != other[name]["digest"]]


def summary_lines(result: dict) -> list[str]:
    params = result["parameters"]
    differing = [n for n, r in params.items() if not r["bitwise_same"]]
    lines = [
        f"{result['framework']} {result['config']}: {result['repeats']} gradients of one batch in one process; "
        f"losses {result['losses']}",
        f"{len(differing)} of {len(params)} parameters' gradients differ between repeats",
    ]
    for name in sorted(differing, key=lambda n: -params[n]["max_rel_diff"])[:20]:
        lines.append(
            f"  {name}: max |diff| {params[name]['max_abs_diff']:.3e} ({params[name]['max_rel_diff']:.3e} of the norm)"
        )
    if "against" in result:
        other = result["against"]
        lines.append(
            f"against {other['file']}: {len(other['differing'])} parameters' gradients differ between processes"
        )
        lines += [f"  {name}" for name in other["differing"][:20]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compare.convergence.determinism",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--framework", default="jax", choices=["jax", "torch"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step", type=int, default=0, help="whose batch (the dataset is a function of seed and step)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="the PyTorch side's device")
    parser.add_argument("--against", help="another process's <out>.json (same config and framework) to compare with")
    parser.add_argument("--out", required=True, help="output path without suffix (.json)")
    args, overrides = parse_args_with_overrides(parser, argv)
    load_config(args.config, overrides)  # refuse a bad config or override before any work
    if args.repeats < 2:
        raise SystemExit(f"--repeats must be >= 2, got {args.repeats}")
    other = json.loads(Path(args.against).read_text())["parameters"] if args.against else None
    if args.framework == "jax":
        info, grads = jax_repeats(args.config, overrides, args.repeats, args.step)
    else:
        info, grads = torch_repeats(args.config, overrides, args.repeats, args.step, args.device)
    result = {
        **info,
        "config": args.config,
        "overrides": overrides,
        "step": args.step,
        "repeats": args.repeats,
        "date": time.strftime("%Y-%m-%d"),
        "parameters": repeat_differences(grads),
    }
    if other is not None:
        result["against"] = {"file": args.against, "differing": against(result["parameters"], other)}
    out = output_path(args.out, ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print("\n".join(summary_lines(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
