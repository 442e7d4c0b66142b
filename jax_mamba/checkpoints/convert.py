"""Weight and config conversion between mamba-ssm's ``MambaLMHeadModel`` and ``jax_mamba``'s, both ways.

Parameter names are the same dotted paths on both sides (the Flax modules mirror mamba-ssm's); the table below is the
whole difference (applied by ``convert_table``). Conversion is strict: missing or unexpected keys and shape mismatches
raise ``ConversionError`` listing them; values are copied exactly (float32), so a round trip is the identity.

| ours (Flax)                     | mamba-ssm (torch state dict)   | layout change                           |
|---------------------------------|--------------------------------|-----------------------------------------|
| ``*.embedding.embedding``       | ``*.embedding.weight``         | none (vocab, d_model)                   |
| ``*.kernel`` (Linear)           | ``*.weight``                   | transposed: (in, out) <-> (out, in)     |
| ``*conv1d.weight``              | ``*conv1d.weight``             | (channels, width) <-> (channels, 1, w)  |
| everything else                 | the same name                  | none                                    |
| (tied embeddings)               | ``lm_head.weight``             | a copy of the embedding                 |

Configs: ``ModelConfig`` <-> the ``config.json`` dict of mamba-ssm's ``MambaConfig`` (Hugging Face layout of
state-spaces/mamba-*). Loading a checkpoint folder needs torch only for ``pytorch_model.bin``.

Mamba-3's A activation (``ssm_cfg.A_activation``) is not a ``MambaConfig`` field: mamba-ssm 2.3.2.post1's ``Mamba3``
computes softplus and its main the heavy-tailed one, and neither writes which. We write it in ssm_cfg; a Mamba-3
config.json without it loads only with the activation given by the caller (``a_activation``), else is refused.
"""

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from flax import nnx

from jax_mamba.checkpoints.convert_table import ConversionError, from_torch, rule_for, to_torch
from jax_mamba.configs.schema import MAMBA3_A_ACTIVATIONS, AttnConfig, ModelConfig, SSMConfig, validate_model
from jax_mamba.models import MambaLMHeadModel, ParamLayout, ssm_layer_kwargs

__all__ = [
    "ConversionError",
    "expected_params",
    "from_mamba_config",
    "from_torch_state_dict",
    "load_pretrained",
    "resolve_a_activation",
    "save_pretrained",
    "to_mamba_config",
    "to_torch_state_dict",
    "torch_name",
]

_RULES = (  # (our suffix, torch suffix, layout change), first match wins
    (".embedding.embedding", ".embedding.weight", "none"),
    (".kernel", ".weight", "kernel"),
    ("conv1d.weight", "conv1d.weight", "conv1d"),
)
# ssm_cfg / MambaConfig keys that choose kernels or runtime behaviour in mamba-ssm, not the function computed.
_RUNTIME_KEYS = {
    "use_fast_path",
    "use_mem_eff_path",
    "layer_idx",
    "device",
    "dtype",
    "process_group",
    "sequence_parallel",
    "fused_add_norm",
}


def torch_name(name: str) -> str:
    """mamba-ssm's state-dict key for our parameter ``name``."""
    return rule_for(name, _RULES)[0]


def expected_params(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Our parameter names and shapes for ``cfg`` (from shapes only; nothing is allocated)."""
    abstract = nnx.eval_shape(lambda: MambaLMHeadModel(cfg, rngs=nnx.Rngs(0)))
    return {k: tuple(v.shape) for k, v in ParamLayout.split(abstract)[1].items()}


def to_torch_state_dict(params: Mapping[str, np.ndarray], cfg: ModelConfig) -> dict[str, np.ndarray]:
    """Our flat params -> mamba-ssm state dict (numpy float32, contiguous)."""
    state = to_torch(params, expected_params(cfg), _RULES, "params")
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["backbone.embedding.weight"]
    return state


def from_torch_state_dict(state: Mapping[str, np.ndarray], cfg: ModelConfig) -> dict[str, np.ndarray]:
    """mamba-ssm state dict (numpy arrays) -> our flat params, strictly checked."""
    state = dict(state)
    if cfg.tie_embeddings and "lm_head.weight" in state:
        lm_head = state.pop("lm_head.weight")
        embedding = state.get("backbone.embedding.weight")
        if embedding is not None and not np.array_equal(np.asarray(lm_head), np.asarray(embedding)):
            raise ConversionError("tie_embeddings is set but lm_head.weight differs from backbone.embedding.weight")
    return from_torch(state, expected_params(cfg), _RULES)


def to_mamba_config(cfg: ModelConfig) -> dict:
    """``ModelConfig`` -> mamba-ssm ``MambaConfig`` fields (JSON-able; ssm_cfg lists the layer's non-default args)."""
    defaults = dataclasses.asdict(SSMConfig())
    ssm = {"layer": cfg.ssm_cfg.layer}
    always = {"d_state", "A_activation"}  # A_activation: a Mamba-3 folder must say it (module docstring)
    for key, value in ssm_layer_kwargs(cfg.ssm_cfg).items():
        if key in always or value != defaults.get(key):
            ssm[key] = list(value) if isinstance(value, tuple) else value
    attn = {k: v for k, v in dataclasses.asdict(cfg.attn_cfg).items() if v != getattr(AttnConfig(), k) or k == "causal"}
    return {
        "d_model": cfg.d_model,
        "d_intermediate": cfg.d_intermediate,
        "n_layer": cfg.n_layer,
        "vocab_size": cfg.vocab_size,
        "ssm_cfg": ssm,
        "attn_layer_idx": list(cfg.attn_layer_idx),
        "attn_cfg": attn if cfg.attn_layer_idx else {},
        "rms_norm": cfg.rms_norm,
        "residual_in_fp32": cfg.residual_in_fp32,
        "fused_add_norm": True,
        "pad_vocab_size_multiple": cfg.pad_vocab_size_multiple,
        "tie_embeddings": cfg.tie_embeddings,
    }


def from_mamba_config(config: Mapping, a_activation: str | None = None, **runtime) -> ModelConfig:
    """mamba-ssm ``MambaConfig`` fields (a config.json dict) -> ``ModelConfig``; ``runtime`` sets impl/dtype/remat.

    Unknown keys are errors; keys that only choose mamba-ssm kernels (use_fast_path, fused_add_norm, ...) are
    ignored. mamba-ssm's MHA is non-causal unless attn_cfg says ``causal``, and the conversion keeps that.
    ``a_activation``: Mamba-3's A activation where ssm_cfg does not say it (``resolve_a_activation``)."""
    config = dict(config)
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = [k for k in config if k not in model_fields and k not in _RUNTIME_KEYS]
    if unknown:
        raise ConversionError(f"unknown MambaConfig keys {unknown}")
    ssm = {k: v for k, v in dict(config.pop("ssm_cfg", {}) or {}).items() if k not in _RUNTIME_KEYS}
    ssm_fields = {f.name for f in dataclasses.fields(SSMConfig)}
    if [k for k in ssm if k not in ssm_fields]:
        raise ConversionError(f"unknown ssm_cfg keys {[k for k in ssm if k not in ssm_fields]}")
    if ssm.get("layer") == "Mamba3":
        ssm["A_activation"] = resolve_a_activation(ssm.get("A_activation"), a_activation)
    for key in ("A_init_range", "dt_limit"):
        if key in ssm:
            ssm[key] = tuple(float(v) for v in ssm[key])
    attn = dict(config.pop("attn_cfg", {}) or {})
    attn_fields = {f.name for f in dataclasses.fields(AttnConfig)}
    if [k for k in attn if k not in attn_fields]:
        raise ConversionError(f"unknown attn_cfg keys {[k for k in attn if k not in attn_fields]}")
    if config.get("attn_layer_idx"):
        attn.setdefault("causal", False)
    kwargs = {k: v for k, v in config.items() if k in model_fields}
    cfg = ModelConfig(**kwargs, ssm_cfg=SSMConfig(**ssm), attn_cfg=AttnConfig(**attn), **runtime)
    try:
        return validate_model(cfg)
    except ValueError as err:
        raise ConversionError(str(err)) from None


def resolve_a_activation(stated: str | None, given: str | None) -> str:
    """Mamba-3's A activation from what a config.json states and what the caller gives: either alone, or both when
    they agree. Raises ConversionError where neither says it or they differ."""
    choices = " or ".join(MAMBA3_A_ACTIVATIONS)
    for value in (stated, given):
        if value is not None and value not in MAMBA3_A_ACTIVATIONS:
            raise ConversionError(f"A_activation must be {choices}, got {value!r}")
    if stated is None and given is None:
        raise ConversionError(
            "this Mamba-3 config.json does not say its A activation (softplus: mamba-ssm 2.3.2.post1; heavy_tail: "
            f"mamba-ssm's main, mamba3-jax): give a_activation={choices}"
        )
    if stated is not None and given is not None and stated != given:
        raise ConversionError(f"config.json's ssm_cfg.A_activation is {stated!r}, but {given!r} was asked for")
    return stated or given


def load_pretrained(
    path: str | Path, a_activation: str | None = None, **runtime
) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """A mamba-ssm checkpoint folder (config.json + model.safetensors or pytorch_model.bin, the Hugging Face layout
    of state-spaces/mamba-*) -> (ModelConfig, our flat params). Offline; torch is needed only for the .bin file.
    ``a_activation``: a Mamba-3 model's A activation where config.json does not say it (``resolve_a_activation``)."""
    folder = Path(path)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file} not found (expected a mamba-ssm checkpoint folder)")
    cfg = from_mamba_config(json.loads(config_file.read_text()), a_activation, **runtime)
    if (folder / "model.safetensors").is_file():
        from safetensors.numpy import load_file

        state = load_file(str(folder / "model.safetensors"))
    elif (folder / "pytorch_model.bin").is_file():
        import torch

        tensors = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        state = {k: v.detach().float().numpy() for k, v in tensors.items()}
    else:
        raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {folder}")
    return cfg, from_torch_state_dict(state, cfg)


def save_pretrained(path: str | Path, cfg: ModelConfig, params: Mapping[str, np.ndarray]) -> None:
    """Write config.json + pytorch_model.bin that mamba-ssm's ``MambaLMHeadModel.from_pretrained`` loads (a Mamba-3
    model's config.json also states its A activation, which mamba-ssm's ``Mamba3`` does not take as an argument)."""
    import torch

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: torch.from_numpy(np.array(v)) for k, v in to_torch_state_dict(params, cfg).items()}
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["backbone.embedding.weight"]
    (folder / "config.json").write_text(json.dumps(to_mamba_config(cfg), indent=2))
    torch.save(state, folder / "pytorch_model.bin")
