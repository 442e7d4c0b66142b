"""mamba-ssm's decoding speed: ``python -m torch_reference.decode_bench --config NAME --batches 1 64``.

The PyTorch side of ``compare.throughput.decode``: mamba-ssm's ``MambaLMHeadModel.generate`` at its best settings (bf16
weights as its own benchmark loads them, CUDA graphs with ``cg=True``, its Triton ``selective_state_update`` and
causal-conv1d's update kernel), greedy (top_k=1), random prompts of ``--prompt_len`` tokens continued by
``--new_tokens`` tokens. The model is built as ``torch_reference.lm.TorchLM`` builds it, so Mamba-3 layers are
mamba-ssm's ``Mamba3`` mixers, decoding with its Triton ``mamba3_siso_step``. A time covers one whole ``generate``
call (prefill and decoding, as ours does), median of
``--reps`` after a warm-up call that captures the graphs. Prints one JSON line."""

import argparse
import json
import statistics
import sys
import time

import torch

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from torch_reference.backend import load
from torch_reference.lm import TorchLM


def measure(config: str, batches: list[int], prompt_len: int, new_tokens: int, reps: int, overrides: list[str]):
    cfg = load_config(config, overrides).model
    ref = load("cuda")
    model = TorchLM(ref, cfg, seed=0).model.to(torch.bfloat16).eval()
    rows = []
    for batch in batches:
        ids = torch.randint(0, cfg.vocab_size, (batch, prompt_len), device="cuda")
        run = lambda ids=ids: model.generate(ids, max_length=prompt_len + new_tokens, cg=True, top_k=1)  # noqa: E731
        out = run()  # captures the CUDA graphs
        assert out.shape == (batch, prompt_len + new_tokens), out.shape
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            began = time.perf_counter()
            run()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - began)
        seconds = statistics.median(times)
        rows.append({"batch": batch, "seconds": seconds, "tokens_per_s": batch * new_tokens / seconds})
    settings = "bf16 weights, CUDA graphs (cg=True), fused add+norm, greedy"
    return {"config": config, "framework": "torch", "reference": ref.describe(), "settings": settings, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_reference.decode_bench", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--prompt_len", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    args, overrides = parse_args_with_overrides(parser, argv)
    result = measure(args.config, args.batches, args.prompt_len, args.new_tokens, args.reps, overrides)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
