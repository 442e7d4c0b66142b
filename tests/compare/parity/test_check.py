"""JAX vs PyTorch mamba-ssm parity on the CPU, against real mamba-ssm code (its CPU fallbacks): ops (outputs and
every input gradient, fp32 and bf16, random shapes) and tiny Mamba-1, Mamba-2 and hybrid LMs (logits, loss, every
parameter gradient, one AdamW step) and a tiny MambaVision against NVlabs' package."""

import json

import numpy as np
import pytest
from flax import nnx

from compare.parity.check import format_table, main, model_parity, op_parity
from jax_mamba.configs import load_config
from jax_mamba.models import MambaVision, ParamLayout

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


def _failures(rows):
    return format_table([r for r in rows if not r.passed]) if not all(r.passed for r in rows) else ""


MODELS = {
    "mamba1": ("mamba1-tiny", []),
    "mamba2": ("mamba2-tiny", ["--model.ssm_cfg.ngroups=2"]),
    "hybrid": ("hybrid-tiny", []),  # GQA (4 query heads, 2 kv heads), rotary on 16 of 16 head dims
    "hybrid-interleaved-conv-mlp": (
        "hybrid-tiny",
        ["--rotary_emb_dim=8", "--rotary_emb_interleaved=true", "--model.attn_cfg.d_conv=4", "--mlp_dim=64"],
    ),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_parity(cpu_reference, rng, name):
    config, overrides = MODELS[name]
    cfg = load_config(config, overrides)
    rows = model_parity(cpu_reference, cfg, batch=2, seq_len=32, seed=int(rng.integers(1 << 30)))
    names = {r.name for r in rows}
    assert {"logits", "loss"} <= names
    n_params = sum(1 for n in names if n.startswith("grad "))
    assert n_params == sum(1 for n in names if n.startswith("adamw ")) and n_params >= 10
    assert all(r.passed for r in rows), _failures(rows)


OPS = [  # config, overrides, seq_len, dtype
    ("mamba1-tiny", ["--model.ssm_cfg.d_state=4"], 1, "float32"),
    ("mamba1-tiny", [], 37, "float32"),
    ("mamba1-tiny", ["--model.d_model=24"], 33, "bfloat16"),
    ("mamba2-tiny", [], 16, "float32"),
    ("mamba2-tiny", ["--model.ssm_cfg.ngroups=2", "--model.ssm_cfg.d_state=8"], 48, "float32"),
    ("mamba2-tiny", ["--model.ssm_cfg.headdim=8", "--model.ssm_cfg.chunk_size=8"], 40, "bfloat16"),
]


@pytest.mark.parametrize("config,overrides,seq_len,dtype", OPS)
def test_op_parity(cpu_reference, rng, config, overrides, seq_len, dtype):
    cfg = load_config(config, overrides).model
    batch = int(rng.integers(1, 4))
    rows = op_parity(cpu_reference, cfg, dtype=dtype, batch=batch, seq_len=seq_len, seed=int(rng.integers(1 << 30)))
    assert len(rows) >= 10
    assert all(r.passed for r in rows), _failures(rows)


def test_cpu_fallback_needs_whole_chunks(cpu_reference):
    with pytest.raises(ValueError, match="multiple of chunk_size"):
        op_parity(cpu_reference, load_config("mamba2-tiny").model, seq_len=20)


def test_command_line_writes_a_report(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert (
        main(["--config", "mamba2-tiny", "--device", "cpu", "--seq_len", "16", "--n_layer", "1", "--out", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "rel L2 err" in printed and "pass" in printed and "cpu" in printed
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["model"]["n_layer"] == 1
    assert report["rows"] and all(row["passed"] for row in report["rows"])
    assert np.isfinite([row["rel_l2_err"] for row in report["rows"]]).all()


@pytest.mark.parametrize("image_size", [45, 64])
def test_mambavision_parity_against_nvlabs(cpu_reference, rng, image_size):
    """The tiny MambaVision against NVlabs' package on mamba-ssm's CPU scan, float32: logits, loss, every parameter
    gradient in eval and in training mode, the running statistics after the training forward, one AdamW step. At
    45 px the hybrid stages' maps (3x3, then 2x2) are padded to whole windows."""
    cfg = load_config("mambavision-tiny", ["--qk_scale=true", "--layer_scale=0.5", "--label_smoothing=0.1"])
    rows = model_parity(cpu_reference, cfg, batch=3, seq_len=image_size, seed=int(rng.integers(1 << 30)))
    names = {r.name for r in rows}
    assert {"eval logits", "train logits", "eval loss", "train loss"} <= names
    grads = [n for n in names if n.startswith("train grad ")]
    assert (
        len(grads) == sum(1 for n in names if n.startswith("eval grad ")) == sum(n.startswith("adamw ") for n in names)
    )
    n_params = len(ParamLayout.split(nnx.eval_shape(lambda: MambaVision(cfg.model, rngs=nnx.Rngs(0))))[1])
    assert len(grads) == n_params and any(n.startswith("train state ") and "running_var" in n for n in names)
    assert all(r.passed for r in rows), _failures(rows)


def test_mambavision_scan_ops(cpu_reference, rng):
    rows = op_parity(cpu_reference, load_config("mambavision-tiny").model, batch=2, seed=int(rng.integers(1 << 30)))
    assert {"selective_scan [pallas] dD", "selective_scan [reference] ddelta_bias"} <= {r.name for r in rows}
    assert all(r.passed for r in rows), _failures(rows)
