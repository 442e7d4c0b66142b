"""Weight and config conversion between NVlabs' ``MambaVision`` (the ``mambavision`` package) and ``jax_mamba``'s,
both ways, and loading of their released checkpoints.

Variable names are the same dotted paths on both sides (the Flax modules mirror NVlabs'); the table is the whole
difference. BatchNorm running statistics (``running_mean``, ``running_var``, ``num_batches_tracked``) are our model
state (``nnx.BatchStat``) and torch buffers; conversion takes and gives params and state together. Strict and exact,
as for the language models (``convert_table``).

| ours (Flax)                       | NVlabs (torch state dict)       | layout change                              |
|-----------------------------------|---------------------------------|--------------------------------------------|
| ``*.kernel`` (Linear)             | ``*.weight``                    | (in, out) <-> (out, in)                    |
| ``*.kernel`` (Conv2d)             | ``*.weight``                    | (kh, kw, in, out) <-> (out, in, kh, kw)    |
| ``*conv1d_x.weight``, ``_z``      | the same name                   | (channels, width) <-> (channels, 1, width) |
| everything else                   | the same name                   | none                                       |

Checkpoints: a Hugging Face folder of ``nvidia/MambaVision-*`` (config.json + model.safetensors or
pytorch_model.bin, weights under ``model.``), or a ``.pth.tar`` of NVlabs' repository (``state_dict`` or ``model``
inside, ``module.`` prefixes from DDP), offline.
"""

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from flax import nnx

from jax_mamba.checkpoints.convert_table import ConversionError, from_torch, rule_for, to_torch
from jax_mamba.configs.loader import load_config
from jax_mamba.configs.schema import MambaVisionConfig, validate_mamba_vision
from jax_mamba.models import MambaVision, ParamLayout

__all__ = [
    "ARCHS",
    "ConversionError",
    "expected_variables",
    "from_nvlabs_config",
    "from_torch_state_dict",
    "load_pretrained",
    "save_checkpoint",
    "split_variables",
    "to_nvlabs_kwargs",
    "to_torch_state_dict",
    "torch_name",
]

_RULES = (
    (".kernel", ".weight", "kernel"),
    ("conv1d_x.weight", "conv1d_x.weight", "conv1d"),
    ("conv1d_z.weight", "conv1d_z.weight", "conv1d"),
)
# NVlabs' model names (timm registry, checkpoint "arch") -> our bundled configs
ARCHS = {
    "mamba_vision_T": "mambavision-T",
    "mamba_vision_T2": "mambavision-T2",
    "mamba_vision_S": "mambavision-S",
    "mamba_vision_B": "mambavision-B",
    "mamba_vision_L": "mambavision-L",
    "mamba_vision_L2": "mambavision-L2",
}
# MambaVision(...) arguments; everything else in a Hugging Face config.json (architectures, auto_map, id2label,
# mean/std/crop settings, torch_dtype, ...) describes packaging or preprocessing, not the function computed.
_ARCH_FIELDS = tuple(
    f.name for f in dataclasses.fields(MambaVisionConfig) if f.name not in ("impl", "compute_dtype", "remat")
)


def torch_name(name: str) -> str:
    """NVlabs' state-dict key for our variable ``name``."""
    return rule_for(name, _RULES)[0]


def expected_variables(cfg: MambaVisionConfig) -> dict[str, tuple[int, ...]]:
    """Our variable names (params and state) and shapes for ``cfg``, from shapes only."""
    _, params, state = ParamLayout.split(nnx.eval_shape(lambda: MambaVision(cfg, rngs=nnx.Rngs(0))))
    return {k: tuple(v.shape) for k, v in {**params, **state}.items()}


def split_variables(variables: Mapping[str, np.ndarray], cfg: MambaVisionConfig) -> tuple[dict, dict]:
    """(params, state) of a flat variable dict, as ``ParamLayout.split`` gives them."""
    layout = ParamLayout.split(nnx.eval_shape(lambda: MambaVision(cfg, rngs=nnx.Rngs(0))))[0]
    params = {k: v for k, v in variables.items() if k not in layout.state_names}
    return params, {k: v for k, v in variables.items() if k in layout.state_names}


def to_torch_state_dict(variables: Mapping[str, np.ndarray], cfg: MambaVisionConfig) -> dict[str, np.ndarray]:
    """Our params and state (one dict) -> NVlabs state dict (numpy; float32, num_batches_tracked int64)."""
    return to_torch(variables, expected_variables(cfg), _RULES, "variables")


def from_torch_state_dict(state: Mapping[str, np.ndarray], cfg: MambaVisionConfig) -> dict[str, np.ndarray]:
    """NVlabs state dict (numpy) -> our params and state in one dict, strictly checked."""
    return from_torch(state, expected_variables(cfg), _RULES)


def to_nvlabs_kwargs(cfg: MambaVisionConfig) -> dict:
    """``MambaVision(**kwargs)`` arguments of NVlabs' class for ``cfg`` (JSON-able)."""
    return {name: getattr(cfg, name) for name in _ARCH_FIELDS}


def from_nvlabs_config(config: Mapping, **runtime) -> MambaVisionConfig:
    """``MambaVision`` arguments or a Hugging Face config.json dict -> ``MambaVisionConfig``. Keys that are not
    architecture arguments are ignored (see ``_ARCH_FIELDS``); ``runtime`` sets impl/compute_dtype/remat."""
    kwargs = {k: config[k] for k in _ARCH_FIELDS if k in config}
    if "num_classes" not in kwargs and config.get("id2label"):
        kwargs["num_classes"] = len(config["id2label"])
    for key in ("mlp_ratio", "drop_path_rate", "drop_rate", "attn_drop_rate"):
        if key in kwargs:
            kwargs[key] = float(kwargs[key])
    cfg = MambaVisionConfig(**kwargs, **runtime)
    try:
        return validate_mamba_vision(cfg)
    except ValueError as err:
        raise ConversionError(str(err)) from None


def _strip_prefixes(state: dict) -> dict:
    """Drop the wrappers' prefixes: Hugging Face's ``model.``, DDP's ``module.``, NVlabs' ``encoder.``."""
    for prefix in ("module.", "model.", "encoder."):
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def _torch_file(path: Path) -> dict:
    """A torch.save file; timm's training checkpoints also pickle their arguments (an argparse.Namespace), which
    only a full unpickling reads: that fallback runs pickled code, so load only files you trust."""
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        return torch.load(path, map_location="cpu", weights_only=False)


def _arrays(tensors: Mapping) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v) for k, v in tensors.items()}


def _read_folder(folder: Path) -> tuple[dict, dict]:
    import json

    config = json.loads((folder / "config.json").read_text())
    if (folder / "model.safetensors").is_file():
        from safetensors.numpy import load_file

        return config, load_file(str(folder / "model.safetensors"))
    if (folder / "pytorch_model.bin").is_file():
        return config, _arrays(_torch_file(folder / "pytorch_model.bin"))
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {folder}")


def _read_checkpoint_file(path: Path) -> tuple[str | None, dict]:
    checkpoint = _torch_file(path)
    if not isinstance(checkpoint, dict):
        raise ConversionError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dict")
    for key in ("state_dict", "model"):
        if isinstance(checkpoint.get(key), Mapping):
            return checkpoint.get("arch"), _arrays(checkpoint[key])
    return None, _arrays(checkpoint)


def _complete_from_weights(cfg: MambaVisionConfig, state: Mapping[str, np.ndarray]) -> MambaVisionConfig:
    """Fill what a config.json may leave out but the weights show: the class count and whether the hybrid and conv
    blocks carry layer scales (their initial value does not change a loaded model)."""
    changes = {}
    if "head.weight" in state and state["head.weight"].shape[0] != cfg.num_classes:
        changes["num_classes"] = int(state["head.weight"].shape[0])
    if cfg.layer_scale is None and any(k.endswith(".gamma_1") for k in state):
        changes["layer_scale"] = 1e-5
    if cfg.layer_scale_conv is None and any(k.endswith(".gamma") for k in state):
        changes["layer_scale_conv"] = 1e-5
    return dataclasses.replace(cfg, **changes) if changes else cfg


def load_pretrained(
    path: str | Path, config: str | MambaVisionConfig | None = None, **runtime
) -> tuple[MambaVisionConfig, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """NVlabs weights -> (MambaVisionConfig, params, state), offline.

    ``path``: a Hugging Face ``nvidia/MambaVision-*`` folder (config.json + model.safetensors or pytorch_model.bin),
    or a checkpoint file of NVlabs' repository (``.pth.tar``). The architecture comes from config.json, else from
    ``config`` (a bundled config name such as "mambavision-T", or a ``MambaVisionConfig``), else from the
    checkpoint's ``arch``. The weights must fit it exactly (strict conversion)."""
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path / 'config.json'} not found (expected a MambaVision checkpoint folder)")
        raw_config, state = _read_folder(path)
        cfg = from_nvlabs_config(raw_config, **runtime)
    elif path.is_file():
        arch, state = _read_checkpoint_file(path)
        if config is None and arch not in ARCHS:
            raise ConversionError(
                f"{path} does not name its architecture (arch={arch!r}); pass config= one of {sorted(ARCHS.values())}"
            )
        config = config if config is not None else ARCHS[arch]
        cfg = load_config(config).model if isinstance(config, str) else config
        cfg = dataclasses.replace(cfg, **runtime)
    else:
        raise FileNotFoundError(f"{path} not found (expected a MambaVision checkpoint folder or .pth.tar file)")
    state = _strip_prefixes(state)
    cfg = _complete_from_weights(cfg, state)
    params, model_state = split_variables(from_torch_state_dict(state, cfg), cfg)
    return cfg, params, model_state


def save_checkpoint(
    path: str | Path, cfg: MambaVisionConfig, params: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray]
) -> None:
    """Write a ``.pth.tar`` (``{"state_dict": ..., "arch": ...}``) that NVlabs' ``_load_checkpoint`` loads."""
    import torch

    tensors = {k: torch.from_numpy(np.array(v)) for k, v in to_torch_state_dict({**params, **state}, cfg).items()}
    kwargs = to_nvlabs_kwargs(cfg)
    arch = next((name for name, ours in ARCHS.items() if to_nvlabs_kwargs(load_config(ours).model) == kwargs), None)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": tensors, "arch": arch, "kwargs": kwargs}, path)
