"""The training-curve parity driver (compare.convergence) on the CPU: three seeds of JAX and of mamba-ssm's CPU
fallback, each pair from the same initial weights and batches, follow the same curve step for step in float32;
report, JSON and plot are written; stored results are judged again; an interrupted run resumes; configs the
reference cannot follow step for step are refused before any run starts."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from compare.convergence.curves import main

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")

RECORDED = Path(__file__).parents[3] / "benchmarks" / "convergence"


def test_same_weights_same_curves_on_cpu(tmp_path, capsys):
    """hybrid-tiny (Mamba-2 and attention layers) from seeds 3-5 (from seed 2's weights mamba-ssm's CPU fallback
    turns NaN at step 5: its gradients at step 4 are NaN from the last Mamba-2 layer down, ours are finite)."""
    out = tmp_path / "conv"
    argv = ["--config", "hybrid-tiny", "--steps", "6", "--window", "2", "--device", "cpu", "--seed", "3"]
    assert main([*argv, "--jobs", "3", "--warmup_steps=2", "--seq_len=32", "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert list(result["curves"]) == [f"{f} seed {s}" for f in ("JAX", "mamba-ssm") for s in (3, 4, 5)]
    for seed in (3, 4, 5):
        ours, reference = result["curves"][f"JAX seed {seed}"], result["curves"][f"mamba-ssm seed {seed}"]
        assert len(ours) == 6 and np.all(np.isfinite(ours + reference))
        np.testing.assert_allclose(reference, ours, rtol=2e-4)  # float32, same weights and batches: the same run
        assert ours[-1] < ours[0]  # it trains
    assert not np.allclose(result["curves"]["JAX seed 3"], result["curves"]["JAX seed 4"], rtol=1e-3)
    verdict = result["verdict"]
    assert verdict["agree"] and [s["seed"] for s in verdict["seeds"]] == [3, 4, 5]
    assert all(s["first_step_difference"] < 1e-4 for s in verdict["seeds"])
    assert "float32, AdamW, eager" in result["torch"]["settings"] and result["device"] == "cpu"
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert not out.with_suffix(".partial.json").exists()
    assert "**Verdict: the curves agree**" in out.with_suffix(".md").read_text()
    assert "**Verdict: the curves agree**" in capsys.readouterr().out


def test_judge_reads_the_recorded_breakaway_as_disagree(tmp_path):
    stored = RECORDED / "h100-2026-11-24-mamba1-130m.json"
    out = tmp_path / "again"
    assert main(["--judge", str(stored), "--out", str(out)]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["curves"] == json.loads(stored.read_text())["curves"]
    assert not result["verdict"]["agree"] and "JAX seed 0" in result["verdict"]["reason"]
    report = out.with_suffix(".md").read_text()
    assert "**Verdict: the curves disagree**" in report and "**breaks away**" in report and "Judged again" in report


@pytest.mark.parametrize("name", ["mamba1-130m", "mamba2-130m", "hybrid-130m", "mambavision-T", "mamba1-130m-lr3e-3"])
def test_committed_verdicts_judge_the_same_again(tmp_path, name):
    """The committed 1000-step verdicts: judging their curves again gives the stored verdict (so a change to the
    verdict that would turn them shows up here), over at least three seeds of 1000 steps each."""
    stored = json.loads((RECORDED / f"{name}.json").read_text())
    assert stored["steps"] >= 1000 and len(stored["seeds"]) >= 3
    assert main(["--judge", str(RECORDED / f"{name}.json"), "--out", str(tmp_path / name)]) == 0
    again = json.loads((tmp_path / f"{name}.json").read_text())
    assert again["verdict"] == stored["verdict"] and again["verdict"]["agree"]


def test_resume_runs_only_what_is_missing(tmp_path, monkeypatch):
    """A partial record holding every curve: nothing is run again (both runners fail if called), the verdict and
    report come from the stored curves; a partial record of other settings is refused."""
    import compare.convergence.curves as convergence

    def refuse(*args):
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(convergence, "jax_curve", refuse)
    monkeypatch.setattr(convergence, "torch_curve", refuse)
    rng = np.random.default_rng(0)
    base = 2.0 + 3.0 * np.exp(-np.arange(40) / 8.0)
    curves = {
        f"{f} seed {s}": (base + 0.01 * rng.standard_normal(40)).tolist()
        for f in ("JAX", "mamba-ssm")
        for s in (0, 1, 2)
    }
    out = tmp_path / "resumed"
    overrides = ["--seq_len=32"]
    reference = {"reference": "mamba-ssm (stored)", "settings": "float32, AdamW", "device": "cpu"}
    record = {"config": "mamba1-tiny", "steps": 40, "overrides": overrides, "curves": curves, "reference": reference}
    Path(f"{out}.partial.json").write_text(json.dumps(record))
    argv = ["--config", "mamba1-tiny", "--steps", "40", "--device", "cpu", "--resume", "--out", str(out)]
    assert main([*argv, *overrides]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["curves"] == curves and result["verdict"]["agree"] and result["torch"]["settings"] == "float32, AdamW"
    assert not Path(f"{out}.partial.json").exists()
    Path(f"{out}.partial.json").write_text(json.dumps({**record, "steps": 30}))
    with pytest.raises(SystemExit, match="--resume: the kept run had steps 30"):
        main([*argv, *overrides])


def test_resume_adds_seeds_to_a_finished_run(tmp_path, monkeypatch):
    """With more --seeds, --resume keeps a finished <out>.json's curves and runs only the new seeds' pairs; the
    reference's description and device carry over."""
    import compare.convergence.curves as convergence

    rng = np.random.default_rng(1)
    base = 2.0 + 3.0 * np.exp(-np.arange(40) / 8.0)
    noisy = lambda: (base + 0.01 * rng.standard_normal(40)).tolist()  # noqa: E731
    calls = []

    def jax_curve(config, steps, seed, *rest):
        calls.append(("jax", seed))
        return noisy()

    def torch_curve(config, steps, seed, *rest):
        calls.append(("torch", seed))
        return {"losses": noisy(), "seed": seed, "reference": "mamba-ssm (new)", "settings": "s", "device": "cpu"}

    monkeypatch.setattr(convergence, "jax_curve", jax_curve)
    monkeypatch.setattr(convergence, "torch_curve", torch_curve)
    out = tmp_path / "grown"
    argv = ["--config", "mamba1-tiny", "--steps", "40", "--device", "cpu", "--resume", "--out", str(out)]
    argv.append("--seq_len=32")
    assert main(argv) == 0
    first = json.loads(out.with_suffix(".json").read_text())
    assert sorted(calls) == [(f, s) for f in ("jax", "torch") for s in (0, 1, 2)]
    calls.clear()
    assert main([*argv, "--seeds", "5"]) == 0
    grown = json.loads(out.with_suffix(".json").read_text())
    assert sorted(calls) == [(f, s) for f in ("jax", "torch") for s in (3, 4)]
    assert {k: grown["curves"][k] for k in first["curves"]} == first["curves"] and len(grown["curves"]) == 10
    assert [s["seed"] for s in grown["verdict"]["seeds"]] == [0, 1, 2, 3, 4] and grown["device"] == "cpu"
    with pytest.raises(SystemExit, match="--resume: the kept run had overrides"):
        main([*argv, "--seeds", "5", "--lr=1e-3"])


@pytest.mark.parametrize(
    ("config", "overrides", "message"),
    [
        ("mamba1-tiny", ["--seeds", "2"], "--seeds >= 3"),
        ("mambavision-tiny", ["--optim.name=adamw"], "model.drop_path_rate must be 0"),
        ("mambavision-T", ["--model.drop_path_rate=0"], "optim.name must be adamw"),
        ("graph-mamba-tiny", [], "family 'graph_mamba' is not supported"),
        ("mamba1-tiny", ["--grad_accum_steps=2"], "train.grad_accum_steps must be 1"),
    ],
)
def test_configs_the_reference_cannot_follow_are_refused_before_any_run(
    tmp_path, monkeypatch, config, overrides, message
):
    import compare.convergence.curves as convergence

    monkeypatch.setattr(convergence, "run_curves", lambda *a: pytest.fail("a run started"))
    with pytest.raises(SystemExit, match=message):
        main(["--config", config, "--steps", "40", "--out", str(tmp_path / "x"), *overrides])


def test_judge_keeps_the_stored_curves_and_the_command(tmp_path):
    """Judging a copy in place (its own prefix) rewrites its report, plot and verdict, not its curves."""
    copy = tmp_path / "copy"
    shutil.copy(RECORDED / "h100-2026-11-24-mamba2-130m.json", f"{copy}.json")
    before = json.loads(Path(f"{copy}.json").read_text())
    assert main(["--judge", f"{copy}.json", "--out", str(copy)]) == 0
    after = json.loads(Path(f"{copy}.json").read_text())
    assert after["curves"] == before["curves"] and after["command"] == before["command"]
    assert after["verdict"]["agree"] and Path(f"{copy}.png").is_file()
