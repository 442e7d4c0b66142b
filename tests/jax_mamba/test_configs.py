"""Configs: every bundled YAML loads; overrides; invalid configs fail at load naming the field; published sizes have
mamba-ssm's layer counts and parameter counts (from shapes only, nothing allocated)."""

import math
import re

import jax
import numpy as np
import pytest
from flax import nnx

from jax_mamba.configs import ConfigError, available_configs, load_config
from jax_mamba.models import MambaLMHeadModel, ParamLayout

PUBLISHED = {  # name: (n_layer, d_model)
    "mamba1-130m": (24, 768),
    "mamba1-370m": (48, 1024),
    "mamba1-790m": (48, 1536),
    "mamba1-1.4b": (48, 2048),
    "mamba1-2.8b": (64, 2560),
    "mamba2-130m": (24, 768),
    "mamba2-370m": (48, 1024),
    "mamba2-780m": (48, 1536),
    "mamba2-1.3b": (48, 2048),
    "mamba2-2.7b": (64, 2560),
}


@pytest.mark.parametrize("name", available_configs())
def test_every_bundled_config_loads(name):
    cfg = load_config(name)
    assert cfg.name == name


def test_published_sizes_are_bundled():
    assert set(PUBLISHED) <= set(available_configs())


def _param_count(cfg) -> int:
    abstract = nnx.eval_shape(lambda: MambaLMHeadModel(cfg.model, rngs=nnx.Rngs(0)))
    return sum(math.prod(v.shape) for v in ParamLayout.split(abstract)[1].values())


def _expected_count(n_layer, d, vocab, layer) -> int:
    """Parameter count written out from mamba-ssm's module definitions (expand 2, d_conv 4)."""
    e = 2 * d
    if layer == "Mamba1":
        r, n = math.ceil(d / 16), 16
        per_layer = d * 2 * e + e * 5 + e * (r + 2 * n) + r * e + e + e * n + e + e * d + d
    else:
        n, heads = 128, e // 64
        per_layer = d * (2 * e + 2 * n + heads) + (e + 2 * n) * 5 + 3 * heads + e + e * d + d
    return n_layer * per_layer + vocab * d + d


@pytest.mark.parametrize("name", ["mamba1-130m", "mamba2-130m", "mamba1-1.4b", "mamba2-2.7b"])
def test_published_parameter_counts(name):
    cfg = load_config(name)
    n_layer, d_model = PUBLISHED[name]
    assert (cfg.model.n_layer, cfg.model.d_model, cfg.model.vocab_size) == (n_layer, d_model, 50277)
    expected = _expected_count(n_layer, d_model, cfg.model.padded_vocab_size(), cfg.model.ssm_cfg.layer)
    assert _param_count(cfg) == expected
    if name == "mamba1-130m":
        assert expected == 129_135_360  # the published "mamba-130m" count


def test_overrides_dotted_bare_and_typed():
    cfg = load_config(
        "mamba2-tiny",
        [
            "--train.batch_size=3",
            "--seq_len=32",
            "--model.ssm_cfg.d_state=8",
            "--lr=1e-4",
            "--attn_layer_idx=[1]",
            "--num_heads=4",
            "--dt_limit=[0.0, .inf]",
        ],
    )
    assert (cfg.train.batch_size, cfg.train.seq_len, cfg.model.ssm_cfg.d_state, cfg.optim.lr) == (3, 32, 8, 1e-4)
    assert cfg.model.attn_layer_idx == [1] and cfg.model.attn_cfg.num_heads == 4
    assert cfg.model.ssm_cfg.dt_limit == (0.0, math.inf)
    assert load_config("mamba2-tiny", ["--bias=true"]).model.ssm_cfg.bias is True
    assert load_config("mamba2-tiny", [("data.path", "123")]).data.path == "123"


def test_yaml_base_inheritance(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("base: mamba2-tiny\ntrain:\n  max_steps: 7\n")
    cfg = load_config(str(path))
    assert cfg.train.max_steps == 7 and cfg.model.d_model == load_config("mamba2-tiny").model.d_model
    assert cfg.name == "mine"


BAD = [
    (["--model.ssm_cfg.headdim=48"], "model.ssm_cfg.headdim"),  # d_inner 128 not divisible by 48
    (["--model.ssm_cfg.chunk_size=24"], "model.ssm_cfg.chunk_size: expected a power of two"),
    (["--model.d_model=-8"], "model.d_model: expected a positive integer"),
    (["--train.batch_size=0"], "train.batch_size: expected a positive integer"),
    (["--model.ssm_cfg.d_stat=8"], "unknown config key model.ssm_cfg.d_stat (did you mean 'd_state'?)"),
    (["--model.foo=1"], "unknown config key model.foo"),
    (["--train.batch_size=two"], "config field train.batch_size: expected int"),
    (["--model.ssm_cfg.layer=Mamba4"], "model.ssm_cfg.layer: expected one of"),
    (["--model.ssm_cfg.layer=Mamba3", "--model.ssm_cfg.rope_fraction=0.25"], "model.ssm_cfg.rope_fraction"),
    (["--model.ssm_cfg.layer=Mamba3", "--model.ssm_cfg.A_activation=relu"], "model.ssm_cfg.A_activation"),
    (["--model.ssm_cfg.layer=Mamba3", "--model.ssm_cfg.is_mimo=true", "--model.ssm_cfg.mimo_rank=0"], "mimo_rank"),
    (["--model.ssm_cfg.layer=Mamba3", "--model.ssm_cfg.is_mimo=true", "--model.ssm_cfg.d_state=6"], "d_state"),
    (["--model.ssm_cfg.ngroups=3"], "model.ssm_cfg.ngroups"),
    (["--model.attn_layer_idx=[5]"], "model.attn_layer_idx"),
    (["--model.scan_checkpoint_every=48"], "model.scan_checkpoint_every: expected 0 or a power of two >= 16"),
    (["--model.scan_backend=cuda"], "model.scan_backend: expected one of ('triton', 'mosaic_gpu', 'auto')"),
    (["--model.ssd_checkpoint_every=100"], "model.ssd_checkpoint_every: expected null, 0 or a positive multiple of 64"),
    (["--model.attn_layer_idx=[0]"], "model.attn_cfg.num_heads"),
    (["--optim.min_lr=1.0"], "optim.min_lr"),
    (["--data.kind=audio"], "data.kind"),
    (["--d_conv=3"], "ambiguous: use one of ['model.ssm_cfg.d_conv', 'model.attn_cfg.d_conv']"),
    (["batch_size"], "must look like --key=value"),
]


@pytest.mark.parametrize("overrides,message", BAD)
def test_invalid_configs_fail_at_load_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("mamba2-tiny", overrides)


VISION_BAD = [
    (["--model.depths=[1,1,2]"], "model.depths: expected a list of 4 positive integers"),
    (["--model.num_heads=[1,1,3,4]"], "model.num_heads: expected stage 2's heads dividing its width"),
    (["--model.drop_path_rate=1.0"], "model.drop_path_rate: expected in [0, 1)"),
    (["--model.scan_backend=mosaic"], "model.scan_backend: expected one of"),
    (["--model.d_model=8"], "unknown config key model.d_model"),
    (["--data.kind=text"], "data.kind: expected one of ('shapes', 'image_folder') for family 'mamba_vision'"),
    (["--data.kind=image_folder"], "data.path: expected a path when data.kind is 'image_folder'"),
    (["--data.crop_pct=0"], "data.crop_pct"),
    (["--data.bad_images=ignore"], "data.bad_images"),
    (["--data.worker_type=fork"], "data.worker_type"),
    (["--optim.name=sgd"], "optim.name"),
    (["--label_smoothing=1.0"], "train.label_smoothing"),
    (["--family=audio"], "config field family: expected one of"),
]


@pytest.mark.parametrize("overrides,message", VISION_BAD)
def test_invalid_vision_configs_fail_at_load_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("mambavision-tiny", overrides)


def test_the_family_picks_the_model_section(tmp_path):
    vision = load_config("mambavision-T", ["--dim=96", "--num_classes=10"])
    assert vision.family == "mamba_vision" and (vision.model.dim, vision.model.num_classes) == (96, 10)
    assert load_config("vision-224").model.depths == [1, 3, 8, 4]  # NVlabs' defaults when the file has none
    path = tmp_path / "mine.yaml"
    path.write_text("family: mamba_vision\nmodel:\n  dim: 8\n")
    assert load_config(str(path)).model.dim == 8
    with pytest.raises(ConfigError, match=r"unknown config key model\.dim"):
        load_config("mamba2-tiny", ["--model.dim=8"])


def test_unknown_config_name():
    with pytest.raises(ConfigError, match="not found"):
        load_config("mamba9-13b")


def test_model_builds_and_runs_for_every_small_config():
    for name in ("default", "mamba1-tiny", "mamba2-tiny", "hybrid-tiny"):
        cfg = load_config(name)
        model = MambaLMHeadModel(cfg.model, rngs=nnx.Rngs(0))
        logits = model(np.zeros((1, 5), np.int32))
        assert logits.shape == (1, 5, cfg.model.padded_vocab_size())
        assert bool(jax.numpy.all(jax.numpy.isfinite(logits)))
