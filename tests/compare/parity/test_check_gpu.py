"""On a GPU (marked ``gpu``; needs ``python -m torch_reference.build`` first): our ops and models against mamba-ssm at
its best (CUDA selective scan, causal-conv1d, Triton SSD and norms, fused add+norm), in bf16 at 130m-size layers, and
MambaVision-T against NVlabs' package on mamba-ssm's CUDA scan (which needs only selective_scan_cuda built)."""

import pytest

from compare.parity.check import format_table, model_parity, op_parity
from jax_mamba.configs import load_config

pytestmark = pytest.mark.gpu


def _failures(rows):
    return format_table([r for r in rows if not r.passed])


@pytest.mark.parametrize("config", ["mamba1-130m", "mamba2-130m"])
def test_ops_at_130m_shapes_bf16(cuda_reference, rng, config):
    rows = op_parity(
        cuda_reference,
        load_config(config).model,
        dtype="bfloat16",
        batch=2,
        seq_len=2048,
        seed=int(rng.integers(1 << 30)),
    )
    assert all(r.passed for r in rows), _failures(rows)


@pytest.mark.parametrize("config", ["mamba1-130m", "mamba2-130m"])
def test_130m_size_layers_bf16(cuda_reference, rng, config):
    cfg = load_config(config, ["--model.n_layer=2"])
    rows = model_parity(
        cuda_reference, cfg, compute_dtype="bfloat16", batch=2, seq_len=2048, seed=int(rng.integers(1 << 30))
    )
    assert all(r.passed for r in rows), _failures(rows)


def test_backend_reports_the_fast_paths(cuda_reference):
    assert cuda_reference.device == "cuda"
    assert all(cuda_reference.fast_paths.values()), cuda_reference.describe()


def test_mambavision_t_scan_at_mixer_shapes_bf16(cuda_reference, rng):
    rows = op_parity(
        cuda_reference, load_config("mambavision-T").model, dtype="bfloat16", batch=8, seed=int(rng.integers(1 << 30))
    )
    assert all(r.passed for r in rows), _failures(rows)


def test_mambavision_t_bf16_against_nvlabs(cuda_reference, rng):
    """MambaVision-T (Pallas scan) against NVlabs' package (mamba-ssm's CUDA scan), train and eval mode, 224 px."""
    cfg = load_config("mambavision-T")
    rows = model_parity(
        cuda_reference, cfg, compute_dtype="bfloat16", batch=8, seq_len=224, seed=int(rng.integers(1 << 30))
    )
    assert {"train logits", "eval logits", "train loss", "eval loss"} <= {r.name for r in rows}
    assert all(r.passed for r in rows), _failures(rows)
