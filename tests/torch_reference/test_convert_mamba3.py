"""Mamba-3 checkpoint folders in mamba-ssm's published layout (config.json + weights), written by the real code:
mamba3-jax's model (heavy-tailed A) gives its own logits through our loader, mamba-ssm's ``Mamba3`` module's weights
(softplus) load exactly; a folder whose config.json does not say its A activation loads only when told it."""

import json
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compare.parity.tolerances import rel_l2
from jax_mamba.checkpoints.convert import (
    ConversionError,
    from_torch_state_dict,
    load_pretrained,
    save_pretrained,
    to_mamba_config,
)
from jax_mamba.checkpoints.init_from import InitFromError, read_weights
from jax_mamba.configs import load_config
from jax_mamba.generate.__main__ import main as generate_main
from jax_mamba.generate.load import LoadError, load_mamba_ssm_folder
from jax_mamba.models import MambaLMHeadModel, ParamLayout
from tests.jax_mamba.tokenizer_fixture import write_tokenizer

PEER_RENAMES = {  # mamba3-jax's parameter paths -> mamba-ssm's names, where more than .kernel -> .weight (transposed)
    "backbone.embedder.embedding": "backbone.embedding.weight",
    "backbone.final_norm.weight": "backbone.norm_f.weight",
}
PEER_CONFIGS = {
    "siso-groups-outproj-norm": dict(ngroups=2, is_outproj_norm=True),
    "mimo": dict(is_mimo=True, mimo_rank=2, num_hidden_layers=1),
}


def peer_model(options: dict, rng: np.random.Generator):
    """A mamba3-jax model (its own initialization, then every parameter moved off it: its biases and norm weights
    start at one, which would hide swapped names) and its config."""
    from mamba3_jax import Mamba3Config
    from mamba3_jax.params import create_random_model

    defaults = dict(vocab_size=256, hidden_size=32, state_size=16, head_dim=16, chunk_size=8, num_hidden_layers=2)
    cfg = Mamba3Config(**{**defaults, **options})
    model = create_random_model(cfg, seed=int(rng.integers(1 << 30)))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = jax.tree.map(lambda p: p + 0.1 * jnp.asarray(rng.normal(size=p.shape), p.dtype), params)
    return nnx.merge(graphdef, params, rest), cfg


def peer_state_dict(model) -> dict[str, np.ndarray]:
    """mamba3-jax's parameters under mamba-ssm's names and layouts (its own loading table, read backwards)."""
    state = {}
    for path, value in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        name, array = ".".join(map(str, path)), np.asarray(value[...], np.float32)
        if name in PEER_RENAMES:
            state[PEER_RENAMES[name]] = array
        elif name.endswith(".kernel"):
            state[name.removesuffix("kernel") + "weight"] = np.ascontiguousarray(array.T)
        else:
            state[name] = array
    return state


def published_config(cfg) -> dict:
    """config.json of a Mamba-3 LM as mamba-ssm lays it out: MambaConfig's fields, no A activation."""
    ssm = dict(layer="Mamba3", d_state=cfg.state_size, headdim=cfg.head_dim, expand=cfg.expand, ngroups=cfg.ngroups)
    ssm |= dict(chunk_size=cfg.chunk_size, rope_fraction=cfg.rope_fraction, A_floor=cfg.A_floor)
    ssm |= dict(is_outproj_norm=cfg.is_outproj_norm, is_mimo=cfg.is_mimo, mimo_rank=cfg.mimo_rank)
    return {
        "d_model": cfg.hidden_size,
        "d_intermediate": 0,
        "n_layer": cfg.num_hidden_layers,
        "vocab_size": cfg.vocab_size,
        "ssm_cfg": ssm,
        "rms_norm": True,
        "residual_in_fp32": cfg.residual_in_fp32,
        "fused_add_norm": True,
        "pad_vocab_size_multiple": 8,
        "tie_embeddings": cfg.tie_word_embeddings,
    }


def write_folder(folder, config: dict, state: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file(state, str(folder / "model.safetensors"))


@pytest.mark.parametrize("options", list(PEER_CONFIGS.values()), ids=list(PEER_CONFIGS))
def test_a_mamba3_jax_checkpoint_gives_its_logits_with_the_heavy_tail(tmp_path, rng, options):
    from mamba3_jax import Mamba3ForCausalLM, load_pytorch_weights

    theirs, peer_cfg = peer_model(options, rng)
    state = peer_state_dict(theirs)
    tokens = jnp.asarray(rng.integers(0, peer_cfg.vocab_size, (2, 19)), jnp.int32)
    want = np.asarray(theirs(tokens)["logits"], np.float32)
    check = Mamba3ForCausalLM(peer_cfg, rngs=nnx.Rngs(0))
    load_pytorch_weights(check, state, strict=True)  # the names read backwards are the ones its loader takes
    np.testing.assert_array_equal(np.asarray(check(tokens)["logits"], np.float32), want)

    folder = tmp_path / "mamba3-jax"
    write_folder(folder, published_config(peer_cfg), state)
    with pytest.raises(ConversionError, match=r"does not say its A activation .* give a_activation=softplus or"):
        load_pretrained(folder)
    logits = {}
    for activation in ("heavy_tail", "softplus"):
        cfg, params = load_pretrained(folder, activation, compute_dtype="float32")
        assert cfg.ssm_cfg.A_activation == activation
        layout, template, rest = ParamLayout.split(MambaLMHeadModel(cfg, rngs=nnx.Rngs(0)))
        assert set(params) == set(template)
        logits[activation] = np.asarray(layout.merge(params, rest)(tokens), np.float32)[..., : peer_cfg.vocab_size]
    assert np.isfinite(logits["heavy_tail"]).all()
    assert rel_l2(logits["heavy_tail"], want) <= 1e-4
    assert rel_l2(logits["softplus"], want) > 1e-2


def test_a_mamba_ssm_mamba3_checkpoint_loads_as_softplus(cpu_reference, tmp_path):
    """The weights of mamba-ssm's own Mamba3 mixers (2.3.2.post1: softplus) in a published-layout folder load exactly
    with softplus; its logits are compared on a GPU (tests/torch_reference/test_mamba3_gpu.py), where its kernels
    run."""
    from torch_reference.lm import TorchLM

    cfg = load_config("mamba3-tiny", ["--ngroups=2", "--model.ssm_cfg.is_outproj_norm=true"]).model
    torch_lm = TorchLM(cpu_reference, cfg, seed=5)
    config = to_mamba_config(cfg)
    config["ssm_cfg"].pop("A_activation")
    state = torch_lm.state_dict()
    state.pop("lm_head.weight")  # tied: safetensors refuses a shared tensor
    write_folder(tmp_path / "mamba-ssm", config, {k: np.ascontiguousarray(v) for k, v in state.items()})
    loaded_cfg, params = load_pretrained(tmp_path / "mamba-ssm", "softplus")
    assert loaded_cfg.ssm_cfg.A_activation == "softplus"
    expected = from_torch_state_dict(torch_lm.state_dict(), cfg)
    assert params.keys() == expected.keys() and all(np.array_equal(params[k], expected[k]) for k in expected)


def test_our_folders_say_their_A_activation(tmp_path, rng):
    cfg = load_config("mamba3-tiny", ["--model.ssm_cfg.A_activation=heavy_tail"]).model
    _, template, _ = ParamLayout.split(MambaLMHeadModel(cfg, rngs=nnx.Rngs(0)))
    params = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in template.items()}
    save_pretrained(tmp_path / "ours", cfg, params)
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["ssm_cfg"]["A_activation"] == "heavy_tail"
    loaded, back = load_pretrained(tmp_path / "ours")
    assert loaded.ssm_cfg.A_activation == "heavy_tail" and all(np.array_equal(back[k], params[k]) for k in params)
    assert load_pretrained(tmp_path / "ours", "heavy_tail")[0].ssm_cfg.A_activation == "heavy_tail"
    contradiction = re.escape("config.json's ssm_cfg.A_activation is 'heavy_tail', but 'softplus' was asked for")
    with pytest.raises(ConversionError, match=contradiction):
        load_pretrained(tmp_path / "ours", "softplus")
    with pytest.raises(ConversionError, match=re.escape("A_activation must be softplus or heavy_tail, got 'relu'")):
        load_pretrained(tmp_path / "ours", "relu")


def test_generation_from_a_folder_that_does_not_say_its_activation(tmp_path, rng, capsys):
    cfg = load_config("mamba3-tiny", ["--model.vocab_size=512"]).model  # the test tokenizer's 300 ids
    _, template, _ = ParamLayout.split(MambaLMHeadModel(cfg, rngs=nnx.Rngs(0)))
    params = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in template.items()}
    save_pretrained(tmp_path / "folder", cfg, params)
    (tmp_path / "folder" / "config.json").write_text(json.dumps(published_config_of(tmp_path / "folder")))
    tokenizer = str(write_tokenizer(tmp_path))
    with pytest.raises(LoadError, match="does not say its A activation"):
        load_mamba_ssm_folder(tmp_path / "folder", tokenizer)
    loaded = load_mamba_ssm_folder(tmp_path / "folder", tokenizer, "heavy_tail")
    assert loaded.model.cfg.ssm_cfg.A_activation == "heavy_tail"
    prompt = ["--prompt", "the", "--max_new_tokens", "3", "--tokenizer", tokenizer, "--pretrained"]
    assert generate_main([*prompt, str(tmp_path / "folder")]) == 2
    assert "does not say its A activation" in capsys.readouterr().err
    assert generate_main([*prompt, str(tmp_path / "folder"), "--a_activation", "heavy_tail"]) == 0


def test_fine_tuning_takes_the_runs_activation_where_the_folder_says_none(tmp_path, rng):
    cfg = load_config("mamba3-tiny", ["--model.ssm_cfg.A_activation=heavy_tail"]).model
    _, template, _ = ParamLayout.split(MambaLMHeadModel(cfg, rngs=nnx.Rngs(0)))
    params = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in template.items()}
    save_pretrained(tmp_path / "says", cfg, params)
    shutil.copytree(tmp_path / "says", tmp_path / "silent")
    (tmp_path / "silent" / "config.json").write_text(json.dumps(published_config_of(tmp_path / "says")))
    weights = read_weights(tmp_path / "silent", "lm", cfg)
    assert all(np.array_equal(weights.params[k], params[k]) for k in params)
    softplus_run = load_config("mamba3-tiny").model
    assert read_weights(tmp_path / "silent", "lm", softplus_run).params.keys() == params.keys()
    with pytest.raises(InitFromError, match="A_activation is 'heavy_tail', but 'softplus' was asked for"):
        read_weights(tmp_path / "says", "lm", softplus_run)


def published_config_of(folder) -> dict:
    """A folder's config.json without its A activation, as mamba-ssm writes it."""
    config = json.loads((folder / "config.json").read_text())
    config["ssm_cfg"].pop("A_activation")
    return config
