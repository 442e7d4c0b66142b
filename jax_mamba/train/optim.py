"""AdamW (or LAMB) with linear warmup and cosine decay, global-norm clipping, weight decay on the parameters the task
names (``Task.weight_decay_mask``), parameter groups (frozen parameters and per-group learning rates:
``optim.freeze`` / ``optim.train_only`` / ``optim.lr_scale``, as ``optax.multi_transform`` users write them) and an
exponential moving average of the weights (``optim.ema_decay``)."""

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jax_mamba.configs.loader import ConfigError
from jax_mamba.configs.schema import OptimConfig
from jax_mamba.models.name_patterns import expand_patterns, matches_any

FROZEN = "frozen"


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


def schedule_constants(cfg: OptimConfig, max_steps: int) -> np.ndarray:
    """``learning_rate_schedule``'s constants as float32 (peak lr, warm-up steps, decay steps, end lr): what
    ``traced_schedule`` reads from an argument of the train step rather than from the program."""
    warmup = min(cfg.warmup_steps, max_steps)
    return np.asarray([cfg.lr, warmup, max(max_steps, warmup + 1), cfg.min_lr], np.float32)


def traced_schedule(constants: jax.Array) -> optax.Schedule:
    """``learning_rate_schedule`` with its constants an array (``schedule_constants``), so that trainings differing
    only in lr, min_lr, warm-up or max_steps compile to the same train step (optax's schedule bakes them into the
    program). The same formula as optax's warm-up cosine schedule, in float32 (rates within an ulp of its)."""
    peak, warmup, decay, end = (constants[i] for i in range(4))
    alpha = jnp.where(peak == 0, 0.0, end / jnp.where(peak == 0, 1.0, peak))

    def schedule(count):
        count = jnp.asarray(count, jnp.float32)
        rising = peak * jnp.clip(count, 0, warmup) / jnp.maximum(warmup, 1.0)  # 0 -> peak over the warm-up
        done = jnp.minimum(count - warmup, decay - warmup)
        falling = peak * ((1 - alpha) * 0.5 * (1 + jnp.cos(jnp.pi * done / (decay - warmup))) + alpha)
        return jnp.where(count < warmup, rising, falling)

    return schedule


def parameter_groups(cfg: OptimConfig, names: Sequence[str], head_patterns: Sequence[str] = ()) -> dict[str, str]:
    """{parameter name: group}: ``FROZEN``, or "lr x SCALE" for the first ``lr_scale`` entry whose pattern matches,
    or "lr x 1". Patterns are ``fnmatch`` patterns over our parameter names; "head" stands for ``head_patterns``. A
    pattern that matches no parameter is a ConfigError naming it (a typo would otherwise train everything)."""
    scales = []  # (its patterns, scale) per lr_scale entry, in order
    for entry in _entries(cfg.lr_scale):
        pattern, _, scale = entry.rpartition("=")
        scales.append((expand_patterns(pattern, head_patterns), float(scale)))
    frozen, kept = expand_patterns(cfg.freeze, head_patterns), expand_patterns(cfg.train_only, head_patterns)
    scaled = [q for ps, _ in scales for q in ps]
    for field, patterns in (("freeze", frozen), ("train_only", kept), ("lr_scale", scaled)):
        _check_matches(f"optim.{field}", patterns, names)
    groups = {}
    for name in names:
        if matches_any(name, frozen) or (kept and not matches_any(name, kept)):
            groups[name] = FROZEN
        else:
            groups[name] = next((f"lr x {s:g}" for ps, s in scales if matches_any(name, ps)), "lr x 1")
    return groups


def make_optimizer(
    cfg: OptimConfig,
    max_steps: int,
    decay_mask: dict[str, bool],
    head_patterns: Sequence[str] = (),
    schedule: optax.Schedule | None = None,
) -> optax.GradientTransformation:
    """``decay_mask``: {parameter name: whether weight decay applies} (a task's ``weight_decay_mask``); ``schedule``:
    the learning rate by update count (``learning_rate_schedule`` of ``cfg`` and ``max_steps`` where None). Without
    parameter groups, one AdamW/LAMB over every parameter; with them, frozen parameters get zero updates and no
    optimizer state, the gradient norm is clipped over the trained ones only, and each learning-rate group's
    updates are scaled (the learning rate is the update's last factor, for AdamW and LAMB alike)."""
    optimizer = optax.lamb if cfg.name == "lamb" else optax.adamw
    update = optimizer(
        schedule or learning_rate_schedule(cfg, max_steps),
        b1=cfg.beta1,
        b2=cfg.beta2,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        mask=decay_mask,
    )
    clip = [optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip > 0 else []
    ema = [average_weights(cfg.ema_decay)] if cfg.ema_decay > 0 else []
    if not (cfg.freeze or cfg.train_only or cfg.lr_scale):
        return optax.chain(*clip, update, *ema) if clip or ema else update
    groups = parameter_groups(cfg, list(decay_mask), head_patterns)
    transforms = {FROZEN: optax.set_to_zero()}
    for group in set(groups.values()) - {FROZEN}:
        scale = float(group.removeprefix("lr x "))
        transforms[group] = update if scale == 1 else optax.chain(update, optax.scale(scale))
    zero_frozen = optax.masked(optax.set_to_zero(), {n: g == FROZEN for n, g in groups.items()})
    return optax.chain(zero_frozen, *clip, optax.multi_transform(transforms, groups), *ema)


class WeightAverage(NamedTuple):
    """The state of ``average_weights``: the averaged parameters (float32, like the parameters)."""

    ema: dict


def average_weights(decay: float) -> optax.GradientTransformation:
    """The last link of an optimizer chain: leaves the updates as they are and keeps ``ema <- decay * ema + (1 -
    decay) * (params + updates)``, the moving average of the weights after each step (starting from the initial
    weights), in its state: checkpointed, placed and resumed with the optimizer's."""

    def init(params):
        return WeightAverage(jax.tree.map(lambda p: p.copy(), params))

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("average_weights needs the parameters: call update(updates, state, params)")
        ema = jax.tree.map(lambda e, p, u: decay * e + (1 - decay) * (p + u), state.ema, params, updates)
        return updates, WeightAverage(ema)

    return optax.GradientTransformation(init, update)


def averaged_weights(opt_state) -> dict | None:
    """The moving average of the weights held in ``opt_state`` (``average_weights``), or None if it keeps none."""
    leaves = jax.tree.leaves(opt_state, is_leaf=lambda x: isinstance(x, WeightAverage))
    return next((s.ema for s in leaves if isinstance(s, WeightAverage)), None)


def _entries(text: str) -> list[str]:
    return [e.strip() for e in text.split(",") if e.strip()]


def _check_matches(field: str, patterns: list[str], names: Sequence[str]) -> None:
    for pattern in patterns:
        if not any(matches_any(n, [pattern]) for n in names):
            raise ConfigError(f"{field}: pattern {pattern!r} matches no parameter of this model")
