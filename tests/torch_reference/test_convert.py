"""Weight and config conversion: exact round trips, strict errors listing keys, Hugging Face checkpoint folders."""

import json
import re

import numpy as np
import pytest

from jax_mamba.configs import load_config

torch = pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
from jax_mamba.checkpoints.convert import (  # noqa: E402
    ConversionError,
    expected_params,
    from_mamba_config,
    from_torch_state_dict,
    load_pretrained,
    save_pretrained,
    to_mamba_config,
    to_torch_state_dict,
    torch_name,
)

CONFIGS = {
    "mamba1": load_config("mamba1-tiny").model,
    "mamba2": load_config("mamba2-tiny").model,
    "hybrid": load_config("hybrid-tiny", ["--model.attn_cfg.rotary_emb_dim=0"]).model,
    "untied-layernorm": load_config("mamba2-tiny", ["--tie_embeddings=false", "--rms_norm=false"]).model,
    "mamba2-groups-dhdim-bias": load_config(
        "mamba2-tiny", ["--ngroups=2", "--D_has_hdim=true", "--bias=true", "--model.ssm_cfg.d_ssm=64"]
    ).model,
    "mamba3-outproj-norm": load_config("mamba3-tiny", ["--ngroups=2", "--model.ssm_cfg.is_outproj_norm=true"]).model,
}
# Round trips only: mamba-ssm builds a MIMO Mamba3 only with tilelang installed (its kernels), which the CPU lacks;
# test_mamba3_module checks the MIMO names, shapes and initial values against mamba-ssm's module definition.
NO_TORCH_MODEL = {
    "mamba3-mimo": load_config("mamba3-tiny", ["--model.ssm_cfg.is_mimo=true", "--model.ssm_cfg.mimo_rank=2"]).model,
}


def random_params(cfg, rng):
    return {k: rng.normal(size=s).astype(np.float32) for k, s in expected_params(cfg).items()}


@pytest.mark.parametrize("name", list(CONFIGS | NO_TORCH_MODEL))
def test_round_trip_is_exact(rng, name):
    cfg = (CONFIGS | NO_TORCH_MODEL)[name]
    params = random_params(cfg, rng)
    state = to_torch_state_dict(params, cfg)
    assert "lm_head.weight" in state  # a copy of the embedding when tied, lm_head.kernel.T otherwise
    back = from_torch_state_dict(state, cfg)
    assert back.keys() == params.keys()
    for k in params:
        np.testing.assert_array_equal(back[k], params[k])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_names_and_shapes_match_a_real_mamba_ssm_model(cpu_reference, name):
    from torch_reference.lm import TorchLM

    cfg = CONFIGS[name]
    state = TorchLM(cpu_reference, cfg).state_dict()
    params = from_torch_state_dict(state, cfg)
    ours = to_torch_state_dict(params, cfg)
    assert ours.keys() == state.keys()
    for k in state:
        np.testing.assert_array_equal(ours[k], state[k])


def test_table_rules():
    assert torch_name("backbone.embedding.embedding") == "backbone.embedding.weight"
    assert torch_name("backbone.layers.3.mixer.in_proj.kernel") == "backbone.layers.3.mixer.in_proj.weight"
    assert torch_name("backbone.layers.3.mixer.conv1d.weight") == "backbone.layers.3.mixer.conv1d.weight"
    assert torch_name("backbone.layers.3.mixer.A_log") == "backbone.layers.3.mixer.A_log"


def test_strict_errors_list_the_keys(rng):
    cfg = CONFIGS["mamba2"]
    state = to_torch_state_dict(random_params(cfg, rng), cfg)
    missing = {k: v for k, v in state.items() if k != "backbone.layers.1.mixer.D"}
    with pytest.raises(ConversionError, match=r"missing \['backbone.layers.1.mixer.D'\]"):
        from_torch_state_dict(missing, cfg)
    with pytest.raises(ConversionError, match=r"unexpected \['backbone.layers.0.mixer.extra'\]"):
        from_torch_state_dict({**state, "backbone.layers.0.mixer.extra": np.zeros(3)}, cfg)
    wrong = {**state, "backbone.layers.0.mixer.A_log": np.zeros(5, np.float32)}
    with pytest.raises(ConversionError, match=r"backbone.layers.0.mixer.A_log: \(5,\) does not fit"):
        from_torch_state_dict(wrong, cfg)
    untied = {**state, "lm_head.weight": state["lm_head.weight"] + 1}
    with pytest.raises(ConversionError, match=re.escape("lm_head.weight differs")):
        from_torch_state_dict(untied, cfg)
    params = random_params(cfg, rng)
    params.pop("backbone.norm_f.weight")
    with pytest.raises(ConversionError, match=r"missing \['backbone.norm_f.weight'\]"):
        to_torch_state_dict(params, cfg)


@pytest.mark.parametrize("name", list(CONFIGS | NO_TORCH_MODEL))
def test_config_round_trip(name):
    """Every field the model uses survives (fields the layer type ignores, e.g. headdim for Mamba1, are dropped)."""
    from jax_mamba.models import ssm_layer_kwargs

    cfg = (CONFIGS | NO_TORCH_MODEL)[name]
    mamba = to_mamba_config(cfg)
    json.dumps(mamba)  # config.json-safe
    back = from_mamba_config(mamba)
    assert to_mamba_config(back) == mamba
    assert ssm_layer_kwargs(back.ssm_cfg) == ssm_layer_kwargs(cfg.ssm_cfg)
    assert expected_params(back) == expected_params(cfg)
    if cfg.attn_layer_idx:
        assert back.attn_cfg == cfg.attn_cfg


def test_mamba_config_semantics():
    published = {
        "d_model": 768,
        "n_layer": 24,
        "vocab_size": 50277,
        "ssm_cfg": {"layer": "Mamba2"},
        "rms_norm": True,
        "residual_in_fp32": True,
        "fused_add_norm": True,
        "pad_vocab_size_multiple": 16,
    }
    cfg = from_mamba_config(published)
    assert cfg == load_config("mamba2-130m").model
    hybrid = from_mamba_config({**published, "attn_layer_idx": [3], "attn_cfg": {"num_heads": 12}})
    assert hybrid.attn_cfg.causal is False  # mamba-ssm's MHA default, kept
    with pytest.raises(ConversionError, match="unknown MambaConfig keys"):
        from_mamba_config({**published, "d_modle": 5})
    with pytest.raises(ConversionError, match="unknown ssm_cfg keys"):
        from_mamba_config({**published, "ssm_cfg": {"layer": "Mamba2", "headdimm": 64}})
    with pytest.raises(ConversionError, match=re.escape("model.ssm_cfg.headdim")):
        from_mamba_config({**published, "ssm_cfg": {"layer": "Mamba2", "headdim": 100}})


def test_hugging_face_checkpoint_folders(cpu_reference, tmp_path, rng):
    """mamba-ssm's own save_pretrained -> our loader; our save_pretrained -> mamba-ssm's from_pretrained."""
    from torch_reference.lm import TorchLM

    cfg = CONFIGS["mamba1"]
    torch_lm = TorchLM(cpu_reference, cfg, seed=3)
    torch_lm.model.save_pretrained(str(tmp_path / "theirs"))
    loaded_cfg, params = load_pretrained(tmp_path / "theirs")
    assert to_mamba_config(loaded_cfg) == to_mamba_config(cfg)
    expected = from_torch_state_dict(torch_lm.state_dict(), cfg)
    assert all(np.array_equal(params[k], expected[k]) for k in expected)

    from safetensors.numpy import save_file

    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "config.json").write_text((tmp_path / "theirs" / "config.json").read_text())
    state = torch_lm.state_dict()
    state.pop("lm_head.weight")  # safetensors refuses shared tensors; a tied head may be absent
    save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, str(tmp_path / "st" / "model.safetensors"))
    _, from_safetensors = load_pretrained(tmp_path / "st")
    assert all(np.array_equal(from_safetensors[k], expected[k]) for k in expected)

    mine = random_params(cfg, rng)
    save_pretrained(tmp_path / "ours", cfg, mine)
    reloaded = cpu_reference.MambaLMHeadModel.from_pretrained(str(tmp_path / "ours"))
    state = {k: v.detach().numpy() for k, v in reloaded.state_dict().items()}
    ours = to_torch_state_dict(mine, cfg)
    assert state.keys() == ours.keys() and all(np.array_equal(state[k], ours[k]) for k in ours)
    with pytest.raises(FileNotFoundError, match=re.escape("config.json")):
        load_pretrained(tmp_path / "nowhere")
