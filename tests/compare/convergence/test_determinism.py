"""The gradient-repeat probe (compare.convergence.determinism): its comparison of repeats and of two processes' digests,
and both frameworks' runs on the CPU (where every gradient repeats bitwise)."""

import json

import numpy as np
import pytest

from compare.convergence.determinism import against, main, repeat_differences


def test_repeat_differences_finds_the_parameter_that_moved(rng):
    stable = rng.standard_normal((4, 3)).astype(np.float32)
    moving = rng.standard_normal(5).astype(np.float32)
    moved = moving.copy()
    moved[2] += np.float32(1e-3)
    report = repeat_differences([{"a": stable, "b": moving}, {"a": stable.copy(), "b": moved}])
    assert report["a"]["bitwise_same"] and report["a"]["max_abs_diff"] == 0.0
    assert not report["b"]["bitwise_same"]
    np.testing.assert_allclose(report["b"]["max_abs_diff"], abs(float(moved[2]) - float(moving[2])), rtol=1e-6)
    np.testing.assert_allclose(report["b"]["max_rel_diff"], report["b"]["max_abs_diff"] / np.linalg.norm(moving))
    other = repeat_differences([{"a": stable, "b": moved}])
    assert against(report, other) == ["b"]
    with pytest.raises(SystemExit, match="different parameters"):
        against(report, {"a": other["a"]})


def test_jax_gradients_repeat_on_the_cpu_and_match_another_process(tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    argv = ["--config", "mamba1-tiny", "--repeats", "2", "--seq_len=32", "--batch_size=2"]
    assert main([*argv, "--out", str(first)]) == 0
    assert "0 of 22 parameters' gradients differ between repeats" in capsys.readouterr().out
    assert main([*argv, "--out", str(second), "--against", f"{first}.json"]) == 0
    result = json.loads(second.with_suffix(".json").read_text())
    assert result["framework"] == "jax" and len(result["losses"]) == 2 and np.isfinite(result["losses"]).all()
    assert result["against"]["differing"] == []
    assert all(p["bitwise_same"] for p in result["parameters"].values())


def test_reference_gradients_repeat_on_the_cpu(tmp_path, capsys):
    pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
    out = tmp_path / "torch"
    argv = ["--config", "mamba1-tiny", "--framework", "torch", "--device", "cpu", "--repeats", "2"]
    assert main([*argv, "--seq_len=32", "--batch_size=2", "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["framework"] == "torch" and "cpu" in result["reference"]
    assert len(result["parameters"]) == 22 and result["losses"][0] == result["losses"][1]
    assert "parameters' gradients differ between repeats" in capsys.readouterr().out


def test_one_repeat_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--repeats must be >= 2"):
        main(["--config", "mamba1-tiny", "--repeats", "1", "--out", str(tmp_path / "x")])
