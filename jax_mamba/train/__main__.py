"""Command line: ``python -m jax_mamba.train --config NAME [--data PATH] [--resume] [--key=value ...]``."""

import argparse
import sys
from pathlib import Path

from jax_mamba.checkpoints import run_dir as runs
from jax_mamba.checkpoints.init_from import InitFromError
from jax_mamba.configs.loader import ConfigError, available_configs, load_config, parse_args_with_overrides
from jax_mamba.configs.schema import PATH_DATA_KIND
from jax_mamba.data import DataError
from jax_mamba.data.token_files import META_FILE
from jax_mamba.generate import SamplingConfig, generate
from jax_mamba.generate.load import TEXT_DATA_KINDS, load_run
from jax_mamba.processes import is_leader
from jax_mamba.train.distributed import DistributedError, broadcast_text, initialize_from_env
from jax_mamba.train.loop import TrainingDiverged, train
from jax_mamba.train.sharding import MeshError

EPILOG = """\
overrides: any config field as --section.field=value, or --field=value when the name is unique, e.g.
  --train.batch_size=8 --seq_len=2048 --model.ssm_cfg.d_state=64 --lr=3e-3 --compute_dtype=bfloat16
--data PATH: a text file or folder (language models, bytes) or an image folder with one subfolder per class
  (MambaVision; ImageNet layout, optionally split into train/ and val/).
several GPUs: --mesh.fsdp=N (and --mesh.data, --mesh.context); several hosts: the same command on each, with
  JAX_COORDINATOR_ADDRESS=host0:port JAX_NUM_PROCESSES=P JAX_PROCESS_ID=i (or under SLURM / Open MPI).
outputs (in the run folder, default runs/<config>/<timestamp>/): config.yaml, run.json, metrics.jsonl,
  loss_curve.png, checkpoints/<step>/.
bundled configs: """


SAMPLE_TOKENS = 200  # printed after training a text model
SAMPLE_PROMPTS = {"stdlib": "def "}  # the default corpus is Python source; other text starts with "The "


def _run_dir_override(overrides: list[str]) -> str | None:
    for item in overrides:
        key, _, value = item.removeprefix("--").partition("=")
        if key in ("run_dir", "train.run_dir") and value:
            return value
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jax_mamba.train",
        description="Train a Mamba-family model: a language model (or synthetic task) or a MambaVision classifier.",
        epilog=EPILOG + ", ".join(available_configs()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="bundled config name or YAML path (default: 'default')")
    parser.add_argument("--data", metavar="PATH", help="train on your text (file or folder) or image folder")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue --run_dir=DIR, or the latest run of --config, from its last checkpoint",
    )
    parser.add_argument("--list-configs", action="store_true", help="print the bundled config names and exit")
    parser.add_argument(
        "--sample_tokens",
        type=int,
        default=SAMPLE_TOKENS,
        help=f"text models: print a continuation of this many tokens at the end (default {SAMPLE_TOKENS}; 0: none)",
    )
    args, rest = parse_args_with_overrides(parser, argv)
    if args.list_configs:
        print("\n".join(available_configs()))
        return 0
    overrides: list = list(rest)
    try:
        initialize_from_env()  # several processes (hosts): join the others first
        if args.resume:
            explicit = _run_dir_override(rest)
            run_dir = Path(explicit) if explicit else runs.latest_run(load_config(args.config or "default").name)
            runs.prepare_resume(run_dir)
            source = str(run_dir / runs.CONFIG_FILE)
        else:
            source = args.config or "default"
        if args.data is not None:  # a text file/folder, a token folder/file or an image folder, by the family
            overrides += [
                ("data.kind", _path_data_kind(load_config(source).family, args.data)),
                ("data.path", args.data),
            ]
        cfg = load_config(source, overrides)
        if not args.resume:
            run_dir = Path(broadcast_text(str(runs.new_run_dir(cfg))))  # one folder (named by process 0's clock)
        result = train(cfg, resume=args.resume, run_dir=run_dir)
    except (ConfigError, DataError, runs.RunDirError, DistributedError, MeshError, InitFromError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except TrainingDiverged as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if not is_leader():
        return 0
    rate = f"{result.items_per_s:,.0f}" if result.items_per_s else "n/a"
    peak = f", peak device memory {result.peak_memory_bytes / 2**30:.2f} GiB" if result.peak_memory_bytes else ""
    print(f"done: step {result.step}, train loss {result.loss:.4f}, {rate} {result.unit}/s{peak}")
    print(f"run folder {result.run_dir}: metrics.jsonl, loss_curve.png, checkpoints/")
    if args.sample_tokens > 0 and cfg.family == "lm" and cfg.data.kind in TEXT_DATA_KINDS:
        _print_sample(result.run_dir, SAMPLE_PROMPTS.get(cfg.data.kind, "The "), args.sample_tokens)
    return 0


def _path_data_kind(family: str, path: str) -> str:
    """What ``--data PATH`` means: for language models a token folder (meta.json) or a .bin file of ids is
    "tokens", anything else text; other families read their one path kind."""
    p = Path(path).expanduser()
    if family == "lm" and ((p / META_FILE).is_file() or (p.is_file() and p.suffix == ".bin")):
        return "tokens"
    return PATH_DATA_KIND[family]


def _print_sample(run_dir: Path, prompt: str, tokens: int) -> None:
    """A short continuation of ``prompt`` by the trained model (greedy-ish: temperature 0.7, top-k 40)."""
    loaded = load_run(run_dir)
    ids = loaded.tokenizer.encode(prompt)
    sampling = SamplingConfig(temperature=0.7, top_k=40)
    result = generate(loaded.model, [ids], tokens, sampling=sampling, eos_id=loaded.tokenizer.eos_id)
    text = prompt + loaded.tokenizer.decode([int(t) for t in result.tokens[0, : result.lengths[0]]])
    print(f"sample (temperature 0.7, top-k 40; more with python -m jax_mamba.generate --run_dir {run_dir}):")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
