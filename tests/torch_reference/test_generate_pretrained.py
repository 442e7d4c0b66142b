"""``python -m jax_mamba.generate --pretrained DIR``: a mamba-ssm checkpoint folder (config.json + weights) plus a
tokenizer.json generates what the same weights generate in process."""

import numpy as np
import pytest
from flax import nnx

from jax_mamba.checkpoints.convert import expected_params, save_pretrained
from jax_mamba.configs.loader import load_config
from jax_mamba.data.tokenizer import HFTokenizer
from jax_mamba.generate import SamplingConfig, generate
from jax_mamba.generate.__main__ import main as generate_main
from jax_mamba.models import MambaLMHeadModel, ParamLayout
from tests.jax_mamba.tokenizer_fixture import write_tokenizer


def test_generate_from_a_mamba_ssm_folder(tmp_path, rng, capsys):
    cfg = load_config("hybrid-tiny", ["--vocab_size=300", "--model.compute_dtype=float32"]).model
    params = {k: rng.normal(0, 0.05, s).astype(np.float32) for k, s in expected_params(cfg).items()}
    save_pretrained(tmp_path / "ckpt", cfg, params)
    tokenizer_file = write_tokenizer(tmp_path)
    args = ["--pretrained", str(tmp_path / "ckpt"), "--prompt", "the fox", "--max_new_tokens", "6"]
    assert generate_main([*args, "--temperature", "0", "--no_eos"]) == 2
    assert "pass --tokenizer PATH" in capsys.readouterr().err
    assert generate_main([*args, "--temperature", "0", "--no_eos", "--tokenizer", str(tokenizer_file)]) == 0
    printed = capsys.readouterr().out.split("\n" + "-" * 40)[0]

    layout, _, state = ParamLayout.split(MambaLMHeadModel(cfg, rngs=nnx.Rngs(0)))
    model = layout.merge({k: np.asarray(v) for k, v in params.items()}, state)
    tok = HFTokenizer(tokenizer_file)
    result = generate(model, [tok.encode("the fox")], 6, sampling=SamplingConfig(temperature=0.0))
    assert printed == "the fox" + tok.decode(result.tokens[0].tolist())
    with pytest.raises(SystemExit):
        generate_main(["--prompt", "x"])  # neither --run_dir nor --pretrained
