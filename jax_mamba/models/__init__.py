"""Whole models: mamba-ssm's ``MixerModel`` / ``MambaLMHeadModel`` built from a ``ModelConfig``."""

from jax_mamba.models.mixer_seq_simple import MambaLMHeadModel, MixerModel, compute_dtype_for, ssm_layer_kwargs
from jax_mamba.models.params import ParamLayout

__all__ = ["MambaLMHeadModel", "MixerModel", "ParamLayout", "compute_dtype_for", "ssm_layer_kwargs"]
