"""Whole models: mamba-ssm's ``MixerModel`` / ``MambaLMHeadModel`` built from a ``ModelConfig`` and NVlabs'
``MambaVision`` built from a ``MambaVisionConfig``; Graph-Mamba's ``GPSModel`` from a ``GraphMambaConfig``."""

from jax_mamba.models.graph_mamba import GraphMamba
from jax_mamba.models.mamba_vision import MambaVision
from jax_mamba.models.mixer_seq_simple import MambaLMHeadModel, MixerModel, compute_dtype_for, ssm_layer_kwargs
from jax_mamba.models.params import ParamLayout

__all__ = [
    "GraphMamba",
    "MambaLMHeadModel",
    "MambaVision",
    "MixerModel",
    "ParamLayout",
    "compute_dtype_for",
    "ssm_layer_kwargs",
]
