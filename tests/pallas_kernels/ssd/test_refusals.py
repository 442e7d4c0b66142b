"""What the Pallas SSD refuses before any work: shapes and configs it does not tile, and two walk warpgroups
interpreted without a CPU thread each."""

import jax.numpy as jnp
import pytest

from pallas_kernels import mamba_chunk_scan_combined
from pallas_kernels.ssd.config import SsdConfig


def test_pallas_refuses_two_walk_warpgroups_interpreted_without_a_thread_each(monkeypatch):
    """The interpreter needs a CPU thread for each of a program's warpgroups beside the program's own
    (``interpreted_warpgroups``): with fewer it would hang, so it is refused up front, and the default config keeps
    one."""
    from pallas_kernels.ssd.api import pallas_config

    monkeypatch.setenv("PJRT_NPROC", "2")
    x, B = jnp.zeros((1, 64, 2, 64)), jnp.zeros((1, 64, 1, 256))
    config = SsdConfig(fwd_mosaic=True, fwd_walk_warpgroups=2)
    message = r"fwd_walk_warpgroups=2 interpreted needs XLA's CPU pool of at least 3 threads .* this process has 2"
    with pytest.raises(ValueError, match=message):
        mamba_chunk_scan_combined(x, jnp.zeros((1, 64, 2)), -jnp.ones(2), B, B, 64, impl="pallas", config=config)
    assert pallas_config(2, 8192, 32, 64, 256, jnp.bfloat16, ngroups=4).fwd_walk_warpgroups == 1
    monkeypatch.setenv("PJRT_NPROC", "3")
    assert pallas_config(2, 8192, 32, 64, 256, jnp.bfloat16, ngroups=4).fwd_walk_warpgroups == 2


@pytest.mark.parametrize(
    "change,message",
    [
        ({"headdim": 160}, r"headdim \(x.shape\[3\]\) up to 128, got 160"),
        ({"dstate": 320}, r"N \(B.shape\[3\]\) up to 256, got 320"),
        ({"config": SsdConfig(block_l=24)}, "SsdConfig.block_l must be a power of two >= 16, got 24"),
        ({"config": SsdConfig(num_warps=3)}, "SsdConfig.num_warps must be a positive power of two, got 3"),
        ({"config": {"block_l": 64}}, "config must be an instance of SsdConfig, got dict"),
        ({"config": SsdConfig(checkpoint_every=96)}, "checkpoint_every must be 0 or a positive multiple of block_l=64"),
        ({"config": SsdConfig(shared_scores=1)}, "SsdConfig.shared_scores must be a bool, got 1"),
        ({"config": SsdConfig(bwd_rowwise_dcs="yes")}, "SsdConfig.bwd_rowwise_dcs must be a bool, got 'yes'"),
        ({"config": SsdConfig(state_segment=100)}, "state_segment must be a positive multiple of block_l=64, got 100"),
        ({"config": SsdConfig(bwd_dbc_columns=32)}, "SsdConfig.bwd_dbc_columns must be 64 or 128, got 32"),
        ({"config": SsdConfig(fwd_walk_stages=0)}, "SsdConfig.fwd_walk_stages must be a positive int, got 0"),
        (
            {"dstate": 256, "config": SsdConfig(fwd_mosaic=True, fwd_walk_stages=3)},
            r"fwd_walk_stages=3 needs 291 KB of shared memory for the forward's Mosaic walk at N=256, more than an "
            "SM's 227",
        ),
        ({"config": SsdConfig(fwd_walk_pieces=3)}, "SsdConfig.fwd_walk_pieces must be 1, 2 or 4, got 3"),
        (
            {"dstate": 64, "config": SsdConfig(fwd_mosaic=True, fwd_walk_pieces=2)},
            r"fwd_walk_pieces=2 splits N \(B.shape\[3\]\) into pieces of a multiple of 64 columns, got N=64",
        ),
        ({"config": SsdConfig(fwd_walk_warpgroups=3)}, "SsdConfig.fwd_walk_warpgroups must be 1 or 2, got 3"),
        (
            {"dstate": 64, "config": SsdConfig(fwd_mosaic=True, fwd_walk_warpgroups=2)},
            r"fwd_walk_warpgroups=2 splits N \(B.shape\[3\]\) into halves of a multiple of 64 columns, got N=64",
        ),
        (
            {"dstate": 256, "config": SsdConfig(fwd_mosaic=True, fwd_walk_warpgroups=2, fwd_walk_pieces=2)},
            "fwd_walk_warpgroups=2 loads B and C in halves itself: set fwd_walk_pieces=1, got 2",
        ),
        ({"checkpoint_every": 100}, "checkpoint_every must be None, 0 or a multiple of 64 > 0, got 100"),
        ({"checkpoint_every": 128, "config": SsdConfig()}, "pass either config or checkpoint_every"),
    ],
)
def test_pallas_refuses_what_it_does_not_tile(change, message):
    headdim, dstate = change.get("headdim", 16), change.get("dstate", 16)
    x = jnp.zeros((1, 8, 2, headdim))
    B = jnp.zeros((1, 8, 1, dstate))
    with pytest.raises(ValueError, match=message):
        mamba_chunk_scan_combined(
            x, jnp.zeros((1, 8, 2)), -jnp.ones(2), B, B, 64, impl="pallas", config=change.get("config"),
            checkpoint_every=change.get("checkpoint_every"),
        )  # fmt: skip
