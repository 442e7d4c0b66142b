"""Decoding speed, JAX beside mamba-ssm: ``python -m compare.throughput.decode --configs mamba2-130m --torch``.

For each config and batch size, random prompts of ``--prompt_len`` tokens are continued greedily by
``--new_tokens`` tokens: ours with ``jax_mamba.generate`` (prefill by the chunked kernels, then the compiled decoding
loop; Linear and embedding matrices in bf16, as every use casts them; the SSM state between steps in each of
``--state_dtypes``), mamba-ssm's with its ``generate`` (``torch_reference.decode_bench``: bf16 weights, CUDA graphs;
its cache, SSM state included, takes the weights' dtype: bf16). A time is one whole generate call (prefill included),
median of ``--reps`` after a warm-up call (compilation, graph capture). Tokens/s counts generated tokens only.
Each side runs in its own process. Writes ``<out>.json`` and ``<out>.md``."""

import argparse
import functools
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

from compare.outputs import output_path
from compare.throughput.steps import json_line
from jax_mamba.configs.loader import parse_args_with_overrides
from jax_mamba.generate.decode import STATE_DTYPES


def measure_jax(
    config: str,
    batches: list[int],
    state_dtypes: list[str],
    prompt_len: int,
    new_tokens: int,
    reps: int,
    extra: list[str],
) -> dict:
    import jax
    import numpy as np
    from flax import nnx

    from jax_mamba.configs.loader import load_config
    from jax_mamba.generate import SamplingConfig, generate
    from jax_mamba.models import MambaLMHeadModel

    cfg = load_config(config, extra).model
    model = MambaLMHeadModel(cfg, rngs=nnx.Rngs(0))
    greedy = SamplingConfig(temperature=0.0)
    rows = []
    for batch, state_dtype in itertools.product(batches, state_dtypes):
        prompts = np.random.default_rng(batch).integers(0, cfg.vocab_size, (batch, prompt_len))
        run = functools.partial(generate, model, prompts, new_tokens, sampling=greedy, state_dtype=state_dtype)
        assert run().tokens.shape == (batch, new_tokens)  # compiles
        times = []
        for _ in range(reps):
            began = time.perf_counter()
            run()  # returns host arrays: the work is done
            times.append(time.perf_counter() - began)
        seconds = statistics.median(times)
        row = {"batch": batch, "state_dtype": state_dtype, "seconds": seconds}
        rows.append({**row, "tokens_per_s": batch * new_tokens / seconds})
    device = jax.devices()[0]
    return {"config": config, "framework": "jax", "device": getattr(device, "device_kind", str(device)), "rows": rows}


def write_report(out: Path, header: dict, results: list[dict]) -> list[str]:
    lines = [
        f"# Decoding speed ({header['device']}, {header['date']})",
        "",
        f"Greedy continuation of random {header['prompt_len']}-token prompts by {header['new_tokens']} tokens; "
        f"tokens/s = batch x new tokens / one generate call (prefill included), median of {header['reps']}. "
        f"mamba-ssm: {header.get('torch_settings') or 'not run'}.",
        f"Command: `{header['command']}`",
        "",
        "| config | batch | JAX SSM state | JAX tokens/s | mamba-ssm tokens/s (bf16 state) | JAX / mamba-ssm |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        theirs = {row["batch"]: row for row in r.get("torch", {}).get("rows", [])}
        if "rows" not in r["jax"]:
            lines.append(f"| {r['config']} | | | failed: {r['jax'].get('error', '')[-200:]!r} | | |")
            continue
        for row in r["jax"]["rows"]:
            other = theirs.get(row["batch"])
            if other is None:
                cells = ["not run" if "torch" not in r else "failed", ""]
            else:
                cells = [f"{other['tokens_per_s']:,.0f}", f"{row['tokens_per_s'] / other['tokens_per_s']:.2f}x"]
            ours = f"{row['state_dtype']} | {row['tokens_per_s']:,.0f}"
            lines.append(f"| {r['config']} | {row['batch']} | {ours} | {' | '.join(cells)} |")
    output_path(out, ".md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compare.throughput.decode", description=__doc__)
    parser.add_argument("--configs", nargs="+", default=["mamba1-130m", "mamba2-130m"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--prompt_len", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--state_dtypes", nargs="+", choices=STATE_DTYPES, default=list(STATE_DTYPES), help="JAX's SSM state"
    )
    parser.add_argument("--torch", action="store_true", help="also time mamba-ssm's generate (needs a GPU)")
    parser.add_argument("--jax_only_in_process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", required=True, help="output path without suffix (.json, .md)")
    args, extra = parse_args_with_overrides(parser, argv)
    sizes = [f"--prompt_len={args.prompt_len}", f"--new_tokens={args.new_tokens}", f"--reps={args.reps}"]
    batches = ["--batches", *map(str, args.batches)]
    if args.jax_only_in_process:  # the JAX side's own process (one config)
        result = measure_jax(
            args.configs[0], args.batches, args.state_dtypes, args.prompt_len, args.new_tokens, args.reps, extra
        )
        print(json.dumps(result))
        return 0
    results = []
    for config in args.configs:
        jax_side = [sys.executable, "-m", "compare.throughput.decode", "--jax_only_in_process", "--out=-", "--configs"]
        dtypes = ["--state_dtypes", *args.state_dtypes]
        row = {"config": config, "jax": json_line([*jax_side, config, *batches, *dtypes, *sizes, *extra])}
        if args.torch:
            torch_side = [sys.executable, "-m", "torch_reference.decode_bench", f"--config={config}"]
            row["torch"] = json_line([*torch_side, *batches, *sizes, *extra])
        results.append(row)
        print(json.dumps(row), flush=True)
    header = {
        "device": next((r["jax"]["device"] for r in results if "device" in r["jax"]), "?"),
        "date": time.strftime("%Y-%m-%d"),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "reps": args.reps,
        "command": " ".join(["python -m compare.throughput.decode", *(argv if argv is not None else sys.argv[1:])]),
        "torch_settings": next((r["torch"]["settings"] for r in results if "settings" in r.get("torch", {})), None),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    output_path(out, ".json").write_text(json.dumps({**header, "results": results}, indent=2))
    print("\n".join(write_report(out, header, results)))
    failed = [r for r in results if "rows" not in r["jax"] or ("torch" in r and "rows" not in r["torch"])]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
