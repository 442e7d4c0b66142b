"""compare.scaling on host CPU devices: both sides run on 2 devices (JAX on a 1 x 2 mesh, PyTorch under torchrun
with FSDP2), the report has a row per point with efficiencies and ratios; the mesh per mode and the efficiency
arithmetic."""

import json

import pytest

from compare.scaling.sweep import efficiencies, mesh_overrides


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
    from compare.scaling.sweep import main

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
    """--no-jax reruns the PyTorch side only (a failed reference point, without repeating the JAX runs); here on
    the parallelism --torch_parallel names (DDP), not the fsdp mode's counterpart (FSDP2)."""
    pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
    from compare.scaling.sweep import main

    out = tmp_path / "mamba2-tiny-ddp"
    argv = ["--configs", "mamba2-tiny", "--gpus", "2", "--mode", "fsdp", "--torch", "--no-jax", "--steps", "3"]
    argv += ["--torch_parallel", "ddp"]
    assert main([*argv, "--per_device_batch", "1", "--seq_len", "16", f"--out={out}"]) == 0
    result = json.loads(out.with_name(out.name + ".json").read_text())
    (point,) = result["points"]
    assert "jax" not in point and point["torch"]["items_per_s"] > 0 and point["torch"]["processes"] == 2
    assert result["torch_parallel"] == "ddp" and "DDP" in result["torch_settings"]
    assert "| mamba2-tiny | 2 | 2 | not run |" in out.with_name(out.name + ".md").read_text()
    with pytest.raises(SystemExit):
        main(["--configs", "mamba2-tiny", "--no-jax", f"--out={out}"])


def test_nccl_settings_record_the_default_and_every_other_nccl_variable(monkeypatch):
    from compare.scaling.sweep import nccl_settings

    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    monkeypatch.setenv("NCCL_MAX_NCHANNELS", "4")
    assert nccl_settings() == {"NCCL_NVLS_ENABLE": "0", "NCCL_MAX_NCHANNELS": "4"}
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # set by the caller: kept, and recorded as set
    assert nccl_settings()["NCCL_NVLS_ENABLE"] == "1"


def test_each_count_takes_the_first_gpus_the_parent_may_use():
    from compare.scaling.sweep import visible_gpus

    assert visible_gpus(None, 2) == ["0", "1"]
    assert visible_gpus("2,3", 1) == ["2"] and visible_gpus("2, 3", 2) == ["2", "3"]
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES='2,3' lists 2"):
        visible_gpus("2,3", 4)


def _run(counts, rates, **header):
    base = {"device": "H200", "mode": "fsdp", "per_device_batch": 8, "seq_len": 2048, "steps": 12,
            "nccl": "NCCL_NVLS_ENABLE=0", "xla": "", "date": "2026-11-26", "torch_settings": "FSDP2"}  # fmt: skip
    points = [{"config": "m", "devices": n, "batch_size": 8 * n, "jax": {"items_per_s": r, "peak_memory_gib": 1.0}}
              for n, r in zip(counts, rates, strict=True)]  # fmt: skip
    return {**base, "devices": counts, "command": f"python -m compare.scaling --gpus {counts}", **header,
            "points": points}  # fmt: skip


def test_join_makes_one_report_with_efficiencies_across_runs(tmp_path, capsys):
    from compare.scaling.join import main

    files = []
    for i, (counts, rates) in enumerate([([4], [360.0]), ([1], [100.0]), ([2], [190.0])]):
        files.append(tmp_path / f"run{i}.json")
        files[-1].write_text(json.dumps(_run(counts, rates)))
    out = tmp_path / "joined"
    assert main([*map(str, files), f"--out={out}", "--note", "1 and 2 GPUs ran beside other runs"]) == 0
    joined = json.loads(out.with_name("joined.json").read_text())
    assert [p["devices"] for p in joined["points"]] == [1, 2, 4] and joined["devices"] == [1, 2, 4]
    assert len(joined["command"]) == 3
    report = out.with_name("joined.md").read_text()
    assert "| m | 2 | 16 | 190 | 95% |" in report and "| m | 4 | 32 | 360 | 90% |" in report
    assert "beside other runs" in report and "- `python -m compare.scaling --gpus [4]`" in report


def test_join_refuses_runs_that_disagree_or_repeat_a_point(tmp_path):
    from compare.scaling.join import join, main

    with pytest.raises(ValueError, match="seq_len 2048 against 4096"):
        join([_run([1], [1.0]), _run([2], [2.0], seq_len=4096)])
    with pytest.raises(ValueError, match="m at 2 devices comes from more than one run"):
        join([_run([1, 2], [1.0, 2.0]), _run([2], [2.0])])
    with pytest.raises(ValueError, match=r"different parallelism: \['ddp', 'fsdp'\]"):
        join([_run([1], [1.0], torch_parallel="ddp"), _run([2], [2.0], torch_parallel="fsdp")])
    with pytest.raises(SystemExit):
        main([str(tmp_path / "absent.json"), f"--out={tmp_path / 'x'}"])


def test_join_keeps_the_reference_parallelism_of_the_runs_that_ran_it():
    from compare.scaling.join import join

    header, _ = join([_run([1], [1.0], torch_parallel=None), _run([2], [2.0], torch_parallel="ddp")])
    assert header["torch_parallel"] == "ddp"


def test_the_reference_runs_the_mode_counterpart_unless_told():
    from compare.scaling.sweep import torch_parallel

    assert torch_parallel("fsdp", None) == "fsdp" and torch_parallel("ddp", None) == "ddp"
    assert torch_parallel("fsdp", "ddp") == "ddp" and torch_parallel("context", "ddp") is None


def test_torch_parallel_is_refused_without_the_reference_or_a_counterpart(tmp_path):
    from compare.scaling.sweep import main

    for argv in (["--mode", "fsdp"], ["--mode", "context", "--torch"]):
        with pytest.raises(SystemExit):
            main(["--configs", "mamba2-tiny", *argv, "--torch_parallel", "ddp", f"--out={tmp_path / 'x'}"])
