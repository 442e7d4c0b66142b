"""Command line: ``python -m jax_mamba.train --config NAME [--data PATH] [--resume] [--key=value ...]``."""

import argparse
import sys
from pathlib import Path

from jax_mamba.configs.loader import ConfigError, available_configs, load_config, parse_args_with_overrides
from jax_mamba.configs.schema import PATH_DATA_KIND
from jax_mamba.data import DataError
from jax_mamba.train import run_dir as runs
from jax_mamba.train.loop import TrainingDiverged, train

EPILOG = """\
overrides: any config field as --section.field=value, or --field=value when the name is unique, e.g.
  --train.batch_size=8 --seq_len=2048 --model.ssm_cfg.d_state=64 --lr=3e-3 --compute_dtype=bfloat16
--data PATH: a text file or folder (language models, bytes) or an image folder with one subfolder per class
  (MambaVision; ImageNet layout, optionally split into train/ and val/).
outputs (in the run folder, default runs/<config>/<timestamp>/): config.yaml, run.json, metrics.jsonl,
  loss_curve.png, checkpoints/<step>/.
bundled configs: """


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
    args, rest = parse_args_with_overrides(parser, argv)
    if args.list_configs:
        print("\n".join(available_configs()))
        return 0
    overrides: list = list(rest)
    try:
        if args.resume:
            explicit = _run_dir_override(rest)
            run_dir = Path(explicit) if explicit else runs.latest_run(load_config(args.config or "default").name)
            runs.prepare_resume(run_dir)
            source = str(run_dir / runs.CONFIG_FILE)
        else:
            source = args.config or "default"
        if args.data is not None:  # a text file/folder or an image folder, by the config's family
            overrides += [("data.kind", PATH_DATA_KIND[load_config(source).family]), ("data.path", args.data)]
        cfg = load_config(source, overrides)
        if not args.resume:
            run_dir = runs.new_run_dir(cfg)
        result = train(cfg, resume=args.resume, run_dir=run_dir)
    except (ConfigError, DataError, runs.RunDirError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except TrainingDiverged as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    rate = f"{result.items_per_s:,.0f}" if result.items_per_s else "n/a"
    peak = f", peak device memory {result.peak_memory_bytes / 2**30:.2f} GiB" if result.peak_memory_bytes else ""
    print(f"done: step {result.step}, train loss {result.loss:.4f}, {rate} {result.unit}/s{peak}")
    print(f"run folder {result.run_dir}: metrics.jsonl, loss_curve.png, checkpoints/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
