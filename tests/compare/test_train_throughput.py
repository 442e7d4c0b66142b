"""The throughput driver end to end on tiny configs of two families, training and inference (the real numbers come
from a GPU run, see benchmarks/)."""

import json

from compare.train_throughput import main


def test_train_throughput_writes_json_and_markdown(tmp_path):
    out = tmp_path / "tp"
    argv = ["--configs", "mamba2-tiny", "mambavision-tiny", "--steps", "3", "--batch_size", "2", "--seq_len", "32"]
    assert main([*argv, "--inference", "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    lm, vision = data["runs"]
    assert lm["returncode"] == 0 and lm["unit"] == "tokens" and lm["items_per_s"] > 0 and lm["traces"] == 1
    assert vision["returncode"] == 0 and vision["unit"] == "images" and vision["items_per_s"] > 0
    for run in (lm, vision):
        assert run["inference"]["returncode"] == 0 and run["inference"]["items_per_s"] > 0
        assert run["inference"]["unit"] == run["unit"]
    report = out.with_suffix(".md").read_text()
    assert "| mamba2-tiny |" in report and "| mambavision-tiny |" in report and "Inference" in report
