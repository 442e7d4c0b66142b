"""mamba-ssm's training-step timing (the PyTorch side of compare.train_throughput), run here on the CPU fallback."""

import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


def test_train_bench_runs_and_learns(cpu_reference, capsys):
    from torch_reference.train_bench import main

    assert (
        main(
            [
                "--config",
                "mamba2-tiny",
                "--steps",
                "8",
                "--batch_size",
                "4",
                "--seq_len",
                "32",
                "--device",
                "cpu",
                "--lr=3e-3",
                "--warmup_steps=0",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["framework"] == "torch" and result["tokens_per_s"] > 0 and "cpu" in result["reference"]
    assert np.isfinite(result["final_loss"]) and result["final_loss"] < np.log(256)  # below uniform over bytes
