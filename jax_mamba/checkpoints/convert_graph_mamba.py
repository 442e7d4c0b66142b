"""Weight conversion between ``jax_mamba``'s GraphMamba and its PyTorch side (``torch_reference.graph_mamba_layers``),
both ways, strict and exact (``convert_table``).

The torch modules carry the same dotted names as the Flax ones; the table is the whole difference. BatchNorm running
statistics (``running_mean``, ``running_var``, ``num_batches_tracked``) are our model state (``nnx.BatchStat``) and
torch buffers; conversion takes and gives params and state together.

| ours (Flax)                                | torch state dict                           | layout change           |
|--------------------------------------------|--------------------------------------------|-------------------------|
| ``encoder.edge_encoder.embedding`` (1, d)  | ``encoder.edge_encoder.embedding.weight``  | none (DummyEdge)        |
| ``*.embeddings.{i}.embedding``             | ``*.embeddings.{i}.weight``                | none (vocab, dim)       |
| ``*.kernel`` (Linear)                      | ``*.weight``                               | (in, out) <-> (out, in) |
| ``*self_attn.conv1d.weight``               | the same name                              | (ch, w) <-> (ch, 1, w)  |
| everything else                            | the same name                              | none                    |
"""

from collections.abc import Mapping

import numpy as np
from flax import nnx

from jax_mamba.checkpoints.convert_table import ConversionError, from_torch, rule_for, to_torch
from jax_mamba.configs.schema import GraphMambaConfig
from jax_mamba.models import GraphMamba, ParamLayout

__all__ = [
    "ConversionError",
    "expected_variables",
    "from_torch_state_dict",
    "split_variables",
    "to_torch_state_dict",
    "torch_name",
]

_RULES = (  # (our suffix, torch suffix, layout change), first match wins
    ("edge_encoder.embedding", "edge_encoder.embedding.weight", "none"),
    (".embedding", ".weight", "none"),
    (".kernel", ".weight", "kernel"),
    ("conv1d.weight", "conv1d.weight", "conv1d"),
)


def _layout(cfg: GraphMambaConfig) -> tuple[ParamLayout, dict, dict]:
    return ParamLayout.split(nnx.eval_shape(lambda: GraphMamba(cfg, rngs=nnx.Rngs(0))))


def torch_name(name: str) -> str:
    """The torch state-dict key for our variable ``name``."""
    return rule_for(name, _RULES)[0]


def expected_variables(cfg: GraphMambaConfig) -> dict[str, tuple[int, ...]]:
    """Our variable names (params and state) and shapes for ``cfg``, from shapes only."""
    _, params, state = _layout(cfg)
    return {k: tuple(v.shape) for k, v in {**params, **state}.items()}


def split_variables(variables: Mapping[str, np.ndarray], cfg: GraphMambaConfig) -> tuple[dict, dict]:
    """(params, state) of a flat variable dict, as ``ParamLayout.split`` gives them."""
    state_names = _layout(cfg)[0].state_names
    params = {k: v for k, v in variables.items() if k not in state_names}
    return params, {k: v for k, v in variables.items() if k in state_names}


def to_torch_state_dict(variables: Mapping[str, np.ndarray], cfg: GraphMambaConfig) -> dict[str, np.ndarray]:
    """Our params and state (one dict) -> torch state dict (numpy; float32, num_batches_tracked int64)."""
    return to_torch(variables, expected_variables(cfg), _RULES, "variables")


def from_torch_state_dict(state: Mapping[str, np.ndarray], cfg: GraphMambaConfig) -> dict[str, np.ndarray]:
    """torch state dict (numpy) -> our params and state in one dict, strictly checked."""
    return from_torch(state, expected_variables(cfg), _RULES)
