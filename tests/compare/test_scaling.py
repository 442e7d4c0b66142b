"""compare.scaling on host CPU devices: both sides run on 2 devices (JAX on a 1 x 2 mesh, PyTorch under torchrun
with FSDP2), the report has a row per point with efficiencies and ratios; the mesh per mode and the efficiency
arithmetic."""

import json

import pytest

from compare.scaling import efficiencies, mesh_overrides


def test_mesh_of_each_mode():
    assert mesh_overrides("fsdp", 4) == ["--mesh.data=1", "--mesh.fsdp=4", "--mesh.context=1"]
    assert mesh_overrides("ddp", 2) == ["--mesh.data=2", "--mesh.fsdp=1", "--mesh.context=1"]
    assert mesh_overrides("context", 8) == ["--mesh.data=1", "--mesh.fsdp=1", "--mesh.context=8"]


def test_efficiency_is_per_device_against_the_smallest_count_run():
    points = [
        {"config": "a", "devices": 1, "jax": {"items_per_s": 100.0}},
        {"config": "a", "devices": 2, "jax": {"items_per_s": 190.0}},
        {"config": "a", "devices": 4, "jax": {"returncode": 1}},  # failed: no efficiency
        {"config": "b", "devices": 2, "jax": {"items_per_s": 50.0}},
        {"config": "b", "devices": 4, "jax": {"items_per_s": 100.0}},
        {"config": "c", "devices": 2, "jax": {"items_per_s": 80.0}},  # one count of several devices: none
        {"config": "d", "devices": 1, "jax": {"items_per_s": 80.0}},  # one device alone: the baseline
    ]
    eff = efficiencies(points, "jax")
    assert eff == {("a", 1): 1.0, ("a", 2): pytest.approx(0.95), ("b", 2): 1.0, ("b", 4): 1.0, ("d", 1): 1.0}


def test_scaling_runs_both_sides_on_cpu_devices(tmp_path, capsys):
    pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
    from compare.scaling import main

    out = tmp_path / "scaling"
    argv = ["--configs", "mamba2-tiny", "--gpus", "2", "--mode", "fsdp", "--torch", "--steps", "4"]
    assert main([*argv, "--per_device_batch", "2", "--seq_len", "32", f"--out={out}"]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert [p["devices"] for p in result["points"]] == [2] and [p["batch_size"] for p in result["points"]] == [4]
    for point in result["points"]:
        assert point["jax"]["items_per_s"] > 0 and point["torch"]["items_per_s"] > 0
        assert "--mesh.fsdp=" + str(point["devices"]) in point["jax"]["command"]
        assert point["torch"]["processes"] == point["devices"]
    report = out.with_suffix(".md").read_text()
    assert "NCCL_NVLS_ENABLE=0" in report and "| mamba2-tiny | 2 | 4 |" in report and "FSDP2" in report


def test_scaling_runs_the_reference_alone_with_no_jax(tmp_path):
    """--no-jax reruns the PyTorch side only (a failed reference point, without repeating the JAX runs)."""
    pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
    from compare.scaling import main

    out = tmp_path / "mamba2-tiny-ddp"
    argv = ["--configs", "mamba2-tiny", "--gpus", "2", "--mode", "ddp", "--torch", "--no-jax", "--steps", "3"]
    assert main([*argv, "--per_device_batch", "1", "--seq_len", "16", f"--out={out}"]) == 0
    (point,) = json.loads(out.with_name(out.name + ".json").read_text())["points"]
    assert "jax" not in point and point["torch"]["items_per_s"] > 0 and point["torch"]["processes"] == 2
    assert "| mamba2-tiny | 2 | 2 | not run |" in out.with_name(out.name + ".md").read_text()
    with pytest.raises(SystemExit):
        main(["--configs", "mamba2-tiny", "--no-jax", f"--out={out}"])


def test_nccl_settings_record_the_default_and_every_other_nccl_variable(monkeypatch):
    from compare.scaling import nccl_settings

    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    monkeypatch.setenv("NCCL_MAX_NCHANNELS", "4")
    assert nccl_settings() == {"NCCL_NVLS_ENABLE": "0", "NCCL_MAX_NCHANNELS": "4"}
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # set by the caller: kept, and recorded as set
    assert nccl_settings()["NCCL_NVLS_ENABLE"] == "1"
