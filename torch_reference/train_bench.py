"""mamba-ssm's training step throughput: ``python -m torch_reference.train_bench --config NAME``.

The PyTorch side of ``compare.train_throughput``: ``MambaLMHeadModel`` from the same config (fp32 params), bf16
autocast, cross-entropy on fp32 logits, global-norm clipping at 1.0, ``torch.optim.AdamW`` (0.9, 0.95, weight decay
0.1), on the same byte batches as the JAX run. Prints one JSON line: mean tokens/s over steps 2..N (the first
includes autotuning) and peak allocated CUDA memory."""

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

from jax_mamba.configs.loader import load_config, parse_args_with_overrides
from jax_mamba.data import make_dataset
from torch_reference.backend import load
from torch_reference.lm import TorchLM


def measure(config: str, steps: int, batch_size: int, seq_len: int, overrides: list[str], device: str = "cuda") -> dict:
    cfg = load_config(config, [f"--batch_size={batch_size}", f"--seq_len={seq_len}", "--eval_batches=1", *overrides])
    ref = load(device)
    lm = TorchLM(ref, cfg.model, seed=cfg.train.seed)
    dataset = make_dataset(cfg.data, cfg.train)
    optimizer = torch.optim.AdamW(
        lm.model.parameters(),
        lr=cfg.optim.lr,
        betas=(cfg.optim.beta1, cfg.optim.beta2),
        eps=cfg.optim.eps,
        weight_decay=cfg.optim.weight_decay,
    )
    timed, losses = [], []
    for step in range(steps):
        batch = dataset.train_batch(step, 1)
        ids = torch.from_numpy(batch["inputs"][0]).long().to(device)
        labels = torch.from_numpy(batch["targets"][0]).long().to(device)
        if device == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = lm.model(ids).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())  # synchronizes, as the JAX loop does
        if step > 0:
            timed.append(time.perf_counter() - began)
    tokens = batch_size * seq_len
    return {
        "config": config,
        "framework": "torch",
        "reference": ref.describe(),
        "tokens_per_s": tokens * len(timed) / sum(timed),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "final_loss": losses[-1],
        "parameters": sum(p.numel() for p in lm.model.parameters()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_reference.train_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_len", type=int, default=2048)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: mamba-ssm's CPU fallback")
    args, overrides = parse_args_with_overrides(parser, argv)
    print(json.dumps(measure(args.config, args.steps, args.batch_size, args.seq_len, overrides, args.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
