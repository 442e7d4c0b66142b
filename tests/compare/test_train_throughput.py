"""The throughput driver end to end on a tiny config (the real numbers come from a GPU run, see benchmarks/)."""

import json

from compare.train_throughput import main


def test_train_throughput_writes_json_and_markdown(tmp_path):
    out = tmp_path / "tp"
    assert (
        main(["--configs", "mamba2-tiny", "--steps", "3", "--batch_size", "2", "--seq_len", "32", "--out", str(out)])
        == 0
    )
    data = json.loads(out.with_suffix(".json").read_text())
    (run,) = data["runs"]
    assert run["returncode"] == 0 and run["tokens_per_s"] > 0 and run["traces"] == 1
    assert "| mamba2-tiny |" in out.with_suffix(".md").read_text()
