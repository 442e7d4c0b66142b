"""AdamW with linear warmup and cosine decay, global-norm clipping, and weight decay only on weight matrices."""

import jax
import optax

from jax_mamba.configs.schema import OptimConfig

_DECAYED_SUFFIXES = (".kernel", ".embedding", "conv1d.weight")


def learning_rate_schedule(cfg: OptimConfig, max_steps: int) -> optax.Schedule:
    """0 -> lr linearly over warmup_steps, then cosine from lr to min_lr at max_steps."""
    warmup = min(cfg.warmup_steps, max_steps)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.lr,
        warmup_steps=warmup,
        decay_steps=max(max_steps, warmup + 1),
        end_value=cfg.min_lr,
    )


def weight_decay_mask(params: dict[str, jax.Array]) -> dict[str, bool]:
    """Decay Linear/Embedding/conv weights; never A_log, D, dt_bias, biases or norm weights (mamba-ssm's
    ``_no_weight_decay`` parameters and the usual GPT exclusions)."""
    return {name: name.endswith(_DECAYED_SUFFIXES) for name in params}


def make_optimizer(cfg: OptimConfig, max_steps: int, params: dict[str, jax.Array]) -> optax.GradientTransformation:
    adamw = optax.adamw(
        learning_rate_schedule(cfg, max_steps),
        b1=cfg.beta1,
        b2=cfg.beta2,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        mask=weight_decay_mask(params),
    )
    if cfg.grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(cfg.grad_clip), adamw)
    return adamw
