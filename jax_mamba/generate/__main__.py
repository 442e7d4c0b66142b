"""Command line: ``python -m jax_mamba.generate (--run_dir DIR | --pretrained DIR) --prompt TEXT [...]``."""

import argparse
import sys
import time

from jax_mamba.configs.loader import ConfigError
from jax_mamba.configs.schema import MAMBA3_A_ACTIVATIONS
from jax_mamba.data import DataError
from jax_mamba.generate.decode import STATE_DTYPES, generate
from jax_mamba.generate.load import LoadError, load_mamba_ssm_folder, load_run
from jax_mamba.generate.sampling import SamplingConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jax_mamba.generate",
        description="Continue text prompts with a trained language model (Mamba-1, Mamba-2, Mamba-3 or hybrid).",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run_dir", help="a jax_mamba.train run folder (its latest checkpoint unless --step)")
    source.add_argument("--pretrained", help="a mamba-ssm checkpoint folder (config.json + weights)")
    parser.add_argument(
        "--a_activation",
        choices=MAMBA3_A_ACTIVATIONS,
        help="a Mamba-3 --pretrained folder's A activation where its config.json does not say it",
    )
    parser.add_argument("--step", type=int, help="checkpoint step of --run_dir (default: the latest)")
    parser.add_argument("--tokenizer", help="a tokenizer.json (default: the run's own; bytes if it had none)")
    parser.add_argument("--prompt", action="append", required=True, help="a prompt; repeat for a batch of prompts")
    parser.add_argument("--max_new_tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    parser.add_argument("--top_k", type=int, default=0, help="0: no top-k filter")
    parser.add_argument("--top_p", type=float, default=1.0, help="1.0: no nucleus filter")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--state_dtype", choices=STATE_DTYPES, default="float32", help="the SSM state kept between decoding steps"
    )
    parser.add_argument("--no_eos", action="store_true", help="do not stop at the tokenizer's end-of-text token")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        sampling = SamplingConfig(args.temperature, args.top_k, args.top_p).validate()
        if args.run_dir:
            loaded = load_run(args.run_dir, args.step, args.tokenizer)
        else:
            loaded = load_mamba_ssm_folder(args.pretrained, args.tokenizer, args.a_activation)
        tokenizer = loaded.tokenizer
        prompts = [tokenizer.encode(p) for p in args.prompt]
        if any(not p for p in prompts):
            raise ValueError("--prompt must not be empty")
        eos = None if args.no_eos else tokenizer.eos_id
        began = time.perf_counter()
        result = generate(
            loaded.model, prompts, args.max_new_tokens, sampling=sampling, seed=args.seed, eos_id=eos,
            state_dtype=args.state_dtype,
        )  # fmt: skip
        seconds = time.perf_counter() - began
    except (LoadError, ConfigError, DataError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for prompt, row, n in zip(args.prompt, result.tokens, result.lengths, strict=True):
        ids = [int(t) for t in row[:n] if eos is None or t != eos]
        print(prompt + tokenizer.decode(ids))
        print("-" * 40)
    total = int(result.lengths.sum())
    print(
        f"{loaded.source}: {total} tokens in {seconds:.2f} s (compilation included), tokenizer {tokenizer.name}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
