"""Which configs the reference can train step for step beside ours (``train_curve``, ``gradient_repeats``).
Imports no torch, so that drivers can refuse a config before any process starts."""

import dataclasses

from jax_mamba.configs.schema import RunConfig

CURVE_FAMILIES = ("lm", "mamba_vision")  # Graph-Mamba's reference draws its own node orderings each step


def check_curve_config(cfg: RunConfig) -> None:
    """Refuse, in one line naming the setting, a config whose reference run could not follow ours step by step."""
    if cfg.family not in CURVE_FAMILIES:
        raise SystemExit(f"family {cfg.family!r} is not supported here; expected one of {CURVE_FAMILIES}")
    if cfg.train.grad_accum_steps != 1:
        raise SystemExit(f"train.grad_accum_steps must be 1, got {cfg.train.grad_accum_steps}")
    if cfg.optim.name != "adamw":
        raise SystemExit(
            f"optim.name must be adamw (the reference runner's fused AdamW), got {cfg.optim.name!r}: "
            "pass --optim.name=adamw"
        )
    random = [f.name for f in dataclasses.fields(cfg.model) if "drop" in f.name and getattr(cfg.model, f.name) > 0]
    if random:
        raise SystemExit(
            f"model.{random[0]} must be 0 (the two frameworks' random masks differ): pass "
            + " ".join(f"--model.{name}=0" for name in random)
        )
