"""compare.kernels.ssd_forward_variants on the CPU (its measurements need a GPU and ncu): the variants it compares, the
report table from a result of the recorded shape, and the refusals."""

import os

import pytest

from compare.kernels import ssd_forward_variants as variants


def test_variants_fused_and_split():
    assert variants.pallas_variant("fused").config.fused_forward_max_l >= 2048  # the 130m shape's L: fused path
    assert variants.pallas_variant("split").config.fused_forward_max_l == 0


def test_markdown_totals_per_variant():
    kernel = {"us_per_launch": 100.0, "dram_bytes_per_launch": 2e8, "l2_hit_pct": 50.0, "arithmetic_intensity": 3.0,
              "grid_size": 528, "waves": 1.0, "block_lifetime_us": 100.0}  # fmt: skip
    record = {
        "command": "python -m compare.kernels.ssd_forward_variants",
        "device": "NVIDIA H100 80GB HBM3",
        "date": "2026-11-23",
        "shape": "130m",
        "dims": {"batch": 8},
        "ceilings": {"copy_gbs": 3000.0},
        "variants": [
            {"variant": "fused", "wall_ms": 0.5, "kernel_us": 400.0, "launches": 1, "dram_bytes": 1e9,
             "l2_bytes": 3e9, "kernels": {"ssd_fwd_fused": kernel}},
        ],
    }  # fmt: skip
    text = variants.markdown(record)
    assert "| fused | 0.500 | 400.0 | 1 | 1000.0 | 3000.0 | 2500 |" in text
    assert "| fused | `ssd_fwd_fused` | 100.0 | 200.0 | 50.0 | 3.00 | 528 | 1.00 | 100.00 |" in text


def test_refuses_without_a_gpu(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # the command turns command buffers off
    with pytest.raises(SystemExit, match="JAX sees no GPU"):
        variants.main([])
