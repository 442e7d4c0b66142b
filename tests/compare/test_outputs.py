"""Benchmark output names: ``--out`` is a prefix, kept whole even where it holds a dot."""

from pathlib import Path

from compare.outputs import output_path


def test_output_path_keeps_a_dotted_prefix_whole(tmp_path):
    prefix = tmp_path / "scaling" / "h100x2-mamba2-2.7b-fsdp"
    assert output_path(prefix, ".json") == tmp_path / "scaling" / "h100x2-mamba2-2.7b-fsdp.json"
    assert output_path(str(prefix), ".md").name == "h100x2-mamba2-2.7b-fsdp.md"
    assert output_path(Path("ssd"), ".json") == Path("ssd.json")
