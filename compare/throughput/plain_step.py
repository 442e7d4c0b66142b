"""The training step both sides time: the PyTorch side runs NVlabs' MambaVision in a plain step (no RandAugment,
random erasing, mixup / cutmix or weight average), so our side's timed and profiled steps leave out the recipe a
vision config sets (``vision-224``); the recipe's own cost is a measurement of our side alone. Other families'
configs are unchanged."""

from jax_mamba.configs.loader import load_config

PLAIN_VISION_STEP = [
    "--data.rand_augment=",
    "--data.random_erase=0",
    "--data.mixup_alpha=0",
    "--data.cutmix_alpha=0",
    "--optim.ema_decay=0",
]


def plain_step_overrides(config: str, overrides: list[str]) -> list[str]:
    """``overrides`` after the plain step's for a MambaVision config (so that an explicit override still wins)."""
    return [*PLAIN_VISION_STEP, *overrides] if load_config(config).family == "mamba_vision" else list(overrides)
