"""The decoding-speed driver end to end on a tiny config (the real numbers come from a GPU run, see benchmarks/)."""

import json

from compare.throughput.decode import main


def test_decode_bench_writes_json_and_markdown(tmp_path):
    out = tmp_path / "decode"
    argv = ["--configs", "mamba2-tiny", "--batches", "1", "3", "--prompt_len", "5", "--new_tokens", "7", "--reps", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    rows = data["results"][0]["jax"]["rows"]
    assert [(r["batch"], r["state_dtype"]) for r in rows] == [
        (1, "float32"), (1, "bfloat16"), (3, "float32"), (3, "bfloat16"),
    ]  # fmt: skip
    assert all(r["tokens_per_s"] > 0 for r in rows)
    report = out.with_suffix(".md").read_text()
    assert "| mamba2-tiny | 3 | bfloat16 |" in report and "not run" in report
