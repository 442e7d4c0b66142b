"""Run configuration: dataclasses (``schema``), bundled YAML files and ``--key=value`` overrides (``loader``)."""

from jax_mamba.configs.loader import ConfigError, available_configs, load_config
from jax_mamba.configs.schema import AttnConfig, DataConfig, ModelConfig, OptimConfig, RunConfig, SSMConfig, TrainConfig

__all__ = [
    "AttnConfig",
    "ConfigError",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "RunConfig",
    "SSMConfig",
    "TrainConfig",
    "available_configs",
    "load_config",
]
