"""AdamW (or LAMB) with linear warmup and cosine decay, global-norm clipping, and weight decay on the parameters
the task names (``Task.weight_decay_mask``)."""

import optax

from jax_mamba.configs.schema import OptimConfig


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


def make_optimizer(cfg: OptimConfig, max_steps: int, decay_mask: dict[str, bool]) -> optax.GradientTransformation:
    """``decay_mask``: {parameter name: whether weight decay applies} (a task's ``weight_decay_mask``)."""
    optimizer = optax.lamb if cfg.name == "lamb" else optax.adamw
    update = optimizer(
        learning_rate_schedule(cfg, max_steps),
        b1=cfg.beta1,
        b2=cfg.beta2,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        mask=decay_mask,
    )
    if cfg.grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(cfg.grad_clip), update)
    return update
