"""The training-curve parity driver on the CPU: JAX (two seeds) and mamba-ssm's CPU fallback from the same initial
weights and batches in float32 follow the same curve step for step; report, JSON and plot are written."""

import json

import numpy as np
import pytest

from compare.convergence import agreement, main, smooth

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


def test_same_weights_same_curve_on_cpu(tmp_path, capsys):
    out = tmp_path / "conv"
    argv = ["--config", "hybrid-tiny", "--steps", "6", "--window", "2", "--device", "cpu", "--warmup_steps=2"]
    assert main([*argv, "--seq_len=32", "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    jax0, jax1, torch0 = result["curves"].values()
    assert len(jax0) == len(torch0) == 6 and np.all(np.isfinite(jax0 + jax1 + torch0))
    np.testing.assert_allclose(torch0, jax0, rtol=2e-4)  # float32, same weights and batches: the same run
    assert not np.allclose(jax0, jax1, rtol=1e-3)  # another seed: other weights and batches
    assert jax0[-1] < jax0[0]  # it trains
    assert result["verdict"]["agree"] and result["verdict"]["first_step_difference"] < 1e-4
    assert "float32, AdamW, no torch.compile" in result["torch"]["settings"]
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert "**the curves agree**" in out.with_suffix(".md").read_text()
    assert "**the curves agree**" in capsys.readouterr().out


def test_smoothing_and_verdict():
    np.testing.assert_allclose(smooth([1.0, 3.0, 5.0, 7.0], 2), [1.0, 2.0, 4.0, 6.0])
    np.testing.assert_allclose(smooth([4.0, 2.0], 5), [4.0, 3.0])
    base = [3.0, 2.0, 1.5, 1.2, 1.1, 1.0]
    close, far = [b + 0.01 for b in base], [b + 0.2 for b in base]
    assert agreement(base, far, close, 1)["agree"] and not agreement(base, close, far, 1)["agree"]
