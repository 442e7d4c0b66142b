"""Where a decoding step's GPU time goes:
``python -m compare.characterize.decode_profile --config NAME --batch B --out PATH``.

Runs ``jax_mamba.generate`` as ``compare.throughput.decode`` does (random prompts, greedy), once to compile, ``--reps``
times for the wall time, then once under ``jax.profiler.trace`` (with ``--name_launches``, XLA's command buffers
off in the whole process, so that every launch names its HLO instruction). From the trace's device events it
reports, per decoding step: the wall time, the kernels' summed time, the time the GPU was busy (their union) and so
the idle share, the launches, and each kernel class's and the longest kernels' time and launches. A step whose GPU
sits idle most of the time is bound by launches and the loop's host work, not by its kernels. Writes ``<out>.json``
and ``<out>.md``."""

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

from compare.kernels.launches import launch_gaps, name_every_launch, traced_launches
from compare.outputs import output_path


def summarize(launches: list[tuple[str, str, int, int]], steps: int, wall_s: float) -> dict:
    """Per-step figures of one traced generate call of ``steps`` decoding steps (prefill included, spread over them)."""
    from compare.characterize.kernel_classes import classify

    per_kernel: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    per_class: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for name, _, _, duration in launches:
        for table in (per_kernel[name], per_class[classify(name)]):
            table[0] += duration / 1e3 / steps
            table[1] += 1 / steps
    gaps = launch_gaps(launches, steps)
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1][0])
    return {
        "step_wall_us": wall_s / steps * 1e6,
        "traced_span_us": gaps["span"],
        "kernels_us": gaps["kernels"],
        "busy_us": gaps["busy"],
        "launches": len(launches) / steps,
        "classes": {k: {"us": v[0], "launches": v[1]} for k, v in sorted(per_class.items(), key=lambda kv: -kv[1][0])},
        "kernels": {k: {"us": v[0], "launches": v[1]} for k, v in top},
    }


def profile_decode(config: str, batch: int, prompt_len: int, new_tokens: int, reps: int, extra: list[str]) -> dict:
    import jax
    import numpy as np
    from flax import nnx

    from jax_mamba.configs.loader import load_config
    from jax_mamba.generate import SamplingConfig, generate
    from jax_mamba.models import MambaLMHeadModel

    cfg = load_config(config, extra).model
    model = MambaLMHeadModel(cfg, rngs=nnx.Rngs(0))
    prompts = np.random.default_rng(batch).integers(0, cfg.vocab_size, (batch, prompt_len))
    run = lambda: generate(model, prompts, new_tokens, sampling=SamplingConfig(temperature=0.0))  # noqa: E731
    run()  # compiles
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    launches = traced_launches(run, calls=1, warm_up=False)
    device = jax.devices()[0]
    result = summarize(launches, new_tokens, statistics.median(times))
    return {"config": config, "batch": batch, "device": getattr(device, "device_kind", str(device)), **result}


def write_report(out: Path, result: dict, command: str, top: int) -> list[str]:
    r = result
    idle = 1 - r["busy_us"] / r["step_wall_us"] if r["step_wall_us"] else 0.0
    lines = [
        f"# Decoding step profile: {r['config']}, batch {r['batch']} ({r['device']})",
        "",
        f"Command: `{command}`",
        "",
        f"Per decoding step (prefill spread over the steps): wall {r['step_wall_us']:.0f} us (outside the profiler; "
        f"XLA command buffers {'off' if r['launches_named'] else 'on'}); traced: kernels {r['kernels_us']:.0f} us, "
        f"GPU busy {r['busy_us']:.0f} us ({idle:.0%} of the wall time idle), {r['launches']:.0f} launches.",
        "",
        "| class | us / step | launches / step |",
        "|---|---|---|",
        *(f"| {k} | {v['us']:.1f} | {v['launches']:.1f} |" for k, v in r["classes"].items()),
        "",
        f"| kernel (longest {top}) | us / step | launches / step | us / launch |",
        "|---|---|---|---|",
    ]
    for name, v in list(r["kernels"].items())[:top]:
        per_launch = v["us"] / max(v["launches"], 1e-9)
        lines.append(f"| `{name[:70]}` | {v['us']:.1f} | {v['launches']:.1f} | {per_launch:.2f} |")
    output_path(out, ".md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    from jax_mamba.configs.loader import parse_args_with_overrides

    parser = argparse.ArgumentParser(prog="python -m compare.characterize.decode_profile", description=__doc__)
    parser.add_argument("--config", default="mamba2-130m")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt_len", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--top", type=int, default=25, help="kernels listed in the report")
    parser.add_argument("--name_launches", action="store_true", help="XLA command buffers off (every launch named)")
    parser.add_argument("--out", required=True, help="output path without suffix (.json, .md)")
    args, extra = parse_args_with_overrides(parser, argv)
    if args.name_launches:
        name_every_launch()
    result = profile_decode(args.config, args.batch, args.prompt_len, args.new_tokens, args.reps, extra)
    result["launches_named"] = args.name_launches
    command = " ".join(["python -m compare.characterize.decode_profile", *(argv if argv is not None else sys.argv[1:])])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_path(out, ".json").write_text(json.dumps({"command": command, **result}, indent=2))
    print("\n".join(write_report(out, result, command, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
