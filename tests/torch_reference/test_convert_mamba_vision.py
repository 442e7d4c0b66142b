"""MambaVision weight conversion with NVlabs' package: exact round trips (parameters and batch statistics), names and
shapes of a real NVlabs model, strict errors, their checkpoint layouts (Hugging Face folders, the repository's
.pth.tar) loaded offline, and ours loaded back by their loader."""

import json
import re

import numpy as np
import pytest

from jax_mamba.configs import load_config
from tests.torch_reference import conversion_checks as checks

torch = pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
from jax_mamba.checkpoints.convert_mamba_vision import (  # noqa: E402
    ConversionError,
    expected_variables,
    from_nvlabs_config,
    from_torch_state_dict,
    load_pretrained,
    save_checkpoint,
    split_variables,
    to_nvlabs_kwargs,
    to_torch_state_dict,
    torch_name,
)

CONFIGS = {
    "tiny": load_config("mambavision-tiny").model,
    "layer-scales-qk-norm": load_config(
        "mambavision-tiny", ["--layer_scale=1e-5", "--layer_scale_conv=0.1", "--qk_scale=true", "--num_classes=7"]
    ).model,
}


def random_variables(cfg, rng) -> dict:
    return checks.random_variables(expected_variables(cfg), rng)


def nvlabs_model(reference, cfg, seed=0):
    from torch_reference.mamba_vision import TorchMambaVision

    return TorchMambaVision(reference, cfg, seed)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_round_trip_is_exact(rng, name):
    cfg = CONFIGS[name]
    variables = random_variables(cfg, rng)
    state = to_torch_state_dict(variables, cfg)
    assert state["patch_embed.conv_down.0.weight"].shape == (8, 3, 3, 3)  # (out, in, kh, kw)
    assert state["levels.2.blocks.0.mixer.conv1d_x.weight"].shape == (32, 1, 3)
    assert state["norm.num_batches_tracked"].dtype == np.int64
    checks.assert_same_variables(from_torch_state_dict(state, cfg), variables)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_names_and_shapes_match_nvlabs_model(cpu_reference, name):
    cfg = CONFIGS[name]
    theirs = nvlabs_model(cpu_reference, cfg).state_dict()
    checks.assert_same_variables(to_torch_state_dict(from_torch_state_dict(theirs, cfg), cfg), theirs)


def test_table_rules():
    assert torch_name("levels.2.blocks.0.mixer.in_proj.kernel") == "levels.2.blocks.0.mixer.in_proj.weight"
    assert torch_name("patch_embed.conv_down.3.kernel") == "patch_embed.conv_down.3.weight"
    assert torch_name("levels.2.blocks.0.mixer.conv1d_z.weight") == "levels.2.blocks.0.mixer.conv1d_z.weight"
    assert torch_name("norm.running_var") == "norm.running_var"


def test_strict_errors_list_the_keys(rng):
    cfg = CONFIGS["tiny"]
    state = to_torch_state_dict(random_variables(cfg, rng), cfg)
    missing = {k: v for k, v in state.items() if k != "norm.running_mean"}
    with pytest.raises(ConversionError, match=r"missing \['norm.running_mean'\]"):
        from_torch_state_dict(missing, cfg)
    with pytest.raises(ConversionError, match=r"unexpected \['head.extra'\]"):
        from_torch_state_dict({**state, "head.extra": np.zeros(3)}, cfg)
    wrong = {**state, "head.weight": np.zeros((3, 128), np.float32)}
    with pytest.raises(ConversionError, match=r"head.weight: \(3, 128\) does not fit head.kernel"):
        from_torch_state_dict(wrong, cfg)
    variables = random_variables(cfg, rng)
    variables.pop("levels.0.blocks.0.conv1.bias")
    with pytest.raises(ConversionError, match=r"missing \['levels.0.blocks.0.conv1.bias'\]"):
        to_torch_state_dict(variables, cfg)


def test_nvlabs_config_round_trip_and_hugging_face_keys():
    cfg = CONFIGS["layer-scales-qk-norm"]
    kwargs = to_nvlabs_kwargs(cfg)
    json.dumps(kwargs)
    assert from_nvlabs_config(kwargs) == cfg
    hf = {"architectures": ["MambaVisionModelForImageClassification"], "model_type": "mambavision", "crop_pct": 0.9}
    published = {**hf, "depths": [1, 3, 8, 4], "num_heads": [2, 4, 8, 16], "window_size": [8, 8, 14, 7], "dim": 80}
    assert from_nvlabs_config({**published, "in_dim": 32, "mlp_ratio": 4}).dim == 80
    assert from_nvlabs_config({**published, "id2label": {"0": "a", "1": "b"}}).num_classes == 2
    with pytest.raises(ConversionError, match=re.escape("model.num_heads")):
        from_nvlabs_config({**published, "num_heads": [2, 4, 7, 16]})


def _their_state(cpu_reference, cfg, seed=5) -> dict:
    model = nvlabs_model(cpu_reference, cfg, seed).model
    with torch.no_grad():  # batch statistics away from their start, so that loading them is tested
        for name, buffer in model.named_buffers():
            if name.endswith(("running_mean", "running_var", "num_batches_tracked")):
                buffer.add_(torch.ones_like(buffer) * 3)
    return model.state_dict()


def test_hugging_face_folder_loads(cpu_reference, tmp_path):
    """nvidia/MambaVision-*-1K layout: config.json + model.safetensors with the weights under ``model.``."""
    from safetensors.torch import save_file

    cfg = CONFIGS["layer-scales-qk-norm"]
    theirs = _their_state(cpu_reference, cfg)
    folder = tmp_path / "MambaVision-tiny"
    folder.mkdir()
    config = {"architectures": ["MambaVisionModelForImageClassification"], **to_nvlabs_kwargs(cfg)}
    for key in ("layer_scale", "layer_scale_conv", "num_classes"):  # absent from a config.json, read off the weights
        config.pop(key)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({f"model.{k}": v.contiguous() for k, v in theirs.items()}, str(folder / "model.safetensors"))
    loaded_cfg, params, state = load_pretrained(folder, compute_dtype="float32")
    assert to_nvlabs_kwargs(loaded_cfg) == {**to_nvlabs_kwargs(cfg), "layer_scale": 1e-5, "layer_scale_conv": 1e-5}
    assert loaded_cfg.compute_dtype == "float32"
    ours = to_torch_state_dict({**params, **state}, loaded_cfg)
    assert all(np.array_equal(ours[k], theirs[k].numpy()) for k in theirs)
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        load_pretrained(tmp_path)


def test_repository_checkpoint_and_ours_back_into_their_loader(cpu_reference, tmp_path):
    """A .pth.tar of their training script (state_dict, DDP prefixes, arch) loads; ours loads into their model."""
    from torch_reference.mamba_vision import nvlabs_module

    cfg = CONFIGS["tiny"]
    theirs = _their_state(cpu_reference, cfg)
    checkpoint = {"state_dict": {f"module.{k}": v for k, v in theirs.items()}, "epoch": 3, "arch": "custom"}
    torch.save(checkpoint, tmp_path / "model_best.pth.tar")
    with pytest.raises(ConversionError, match=re.escape("pass config=")):
        load_pretrained(tmp_path / "model_best.pth.tar")
    loaded_cfg, params, state = load_pretrained(tmp_path / "model_best.pth.tar", config="mambavision-tiny")
    assert params["norm.weight"].shape == (128,) and int(state["norm.num_batches_tracked"]) == 3

    save_checkpoint(tmp_path / "ours.pth.tar", loaded_cfg, params, state)
    module = nvlabs_module(cpu_reference)
    model = module.MambaVision(**to_nvlabs_kwargs(loaded_cfg))
    module._load_checkpoint(model, str(tmp_path / "ours.pth.tar"), strict=True)  # their loader, strict
    reloaded = model.state_dict()
    assert all(torch.equal(reloaded[k], theirs[k]) for k in theirs)
    assert split_variables({**params, **state}, loaded_cfg)[1].keys() == state.keys()
    with pytest.raises(FileNotFoundError, match="not found"):
        load_pretrained(tmp_path / "nothing.pth.tar")
