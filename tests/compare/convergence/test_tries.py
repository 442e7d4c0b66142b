"""The tries summary (compare.convergence.tries): it reads the GPU script's run folders and the reference's curves,
tells bitwise-equal tries from differing ones, places a recorded run among them, and refuses what it cannot read."""

import json

import numpy as np
import pytest

from compare.convergence.tries import main


def write_jax_try(folder, name, losses):
    run = folder / name
    run.mkdir()
    lines = [json.dumps({"step": i + 1, "loss": loss}) for i, loss in enumerate(losses)]
    lines.insert(1, json.dumps({"step": 1, "event": "eval", "eval_loss": 9.0}))
    (run / "metrics.jsonl").write_text("\n".join(lines))


def test_tries_are_grouped_compared_and_reported(tmp_path, rng):
    steps = 60
    base = 2.0 + 4.0 * np.exp(-np.arange(steps) / 10.0)
    same = base.tolist()
    for t in (1, 2):
        write_jax_try(tmp_path, f"jax-deterministic-try{t}", same)
    for t in (1, 2, 3):
        write_jax_try(tmp_path, f"jax-default-try{t}", (base + 0.01 * t).tolist())
        (tmp_path / f"torch-try{t}.json").write_text(json.dumps({"losses": (base + 0.1 * t).tolist()}))
    spiky = base + 0.001 * rng.standard_normal(steps)
    spiky[30] = 12.0
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps({"device": "GPU X", "date": "2026-01-01", "curves": {"JAX seed 0": spiky.tolist()}}))
    out = tmp_path / "summary"
    assert (
        main(["--runs", str(tmp_path), "--recorded", f"{recorded}:JAX seed 0", "--window", "5", "--out", str(out)]) == 0
    )
    report = out.with_suffix(".md").read_text()
    assert "### JAX deterministic: 2 tries, bitwise the same" in report
    assert (
        f"### JAX default: 3 tries, last-5 means {base[-5:].mean() + 0.01:.3f} to {base[-5:].mean() + 0.03:.3f}"
        in report
    )
    assert "### mamba-ssm: 3 tries" in report
    assert "### recorded: JAX seed 0 (GPU X, 2026-01-01): one run" in report and "| 12.00 at 31 |" in report
    assert set(json.loads(out.with_suffix(".json").read_text())["groups"]) == {
        "JAX deterministic", "JAX default", "mamba-ssm", "recorded: JAX seed 0 (GPU X, 2026-01-01)"
    }  # fmt: skip
    assert out.with_suffix(".png").stat().st_size > 10_000


def test_an_empty_folder_and_uneven_curves_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="no jax-"):
        main(["--runs", str(tmp_path), "--out", str(tmp_path / "x")])
    write_jax_try(tmp_path, "jax-a-try1", [3.0] * 20)
    (tmp_path / "torch-try1.json").write_text(json.dumps({"losses": [3.0] * 19}))
    with pytest.raises(SystemExit, match="different lengths"):
        main(["--runs", str(tmp_path), "--out", str(tmp_path / "x")])


def test_a_non_finite_loss_reads_as_nan(tmp_path):
    """The training loop writes a non-finite loss as null: a try keeps it as NaN, never as a missing step."""
    write_jax_try(tmp_path, "jax-a-try1", [3.0, None] + [2.0] * 18)
    (tmp_path / "torch-try1.json").write_text(json.dumps({"losses": [3.0, 2.5] + [2.0] * 18}))
    out = tmp_path / "x"
    assert main(["--runs", str(tmp_path), "--window", "1", "--out", str(out)]) == 0
    ours = json.loads(out.with_suffix(".json").read_text())["groups"]["JAX a"]["try 1"]
    assert ours[0] == 3.0 and np.isnan(ours[1]) and ours[2] == 2.0
