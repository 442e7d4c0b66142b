"""compare.parity.mamba3_jax_peer on the CPU: mamba3-jax loads our weights strictly, its logits differ from ours only by
its A activation (with mamba-ssm's softplus they agree to float32 rounding, SISO with groups and the output norm, and
MIMO), and both training steps run; the report's files."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity import mamba3_jax_peer as peer
from compare.parity.tolerances import rel_l2
from jax_mamba.configs import load_config


@pytest.mark.parametrize(
    "overrides",
    [
        ["--model.ssm_cfg.is_outproj_norm=true", "--model.ssm_cfg.ngroups=2"],
        ["--model.ssm_cfg.is_mimo=true", "--model.ssm_cfg.mimo_rank=2", "--model.n_layer=1"],
    ],
    ids=["siso-norm-groups", "mimo"],
)
def test_the_peer_differs_from_ours_by_its_A_activation_alone(overrides):
    cfg = load_config("mamba3-tiny", [*overrides, "--model.compute_dtype=float32"]).model
    ours, theirs = peer.build_pair(cfg, seed=3)
    tokens = jnp.asarray(np.random.default_rng(3).integers(0, cfg.vocab_size, (2, 37)), jnp.int32)
    want = np.asarray(peer.our_logits(ours, tokens))
    assert rel_l2(np.asarray(peer.peer_logits(theirs, tokens)), want) > 1e-2
    with peer.softplus_A():
        assert rel_l2(np.asarray(peer.peer_logits(theirs, tokens)), want) < 1e-5


def test_command_writes_both_sides(tmp_path):
    out = tmp_path / "peer"
    assert (
        peer.main(
            ["--config", "mamba3-tiny", "--batch_size", "2", "--seq_len", "32", "--steps", "2", "--out", str(out)]
        )
        == 0
    )
    result = json.loads((tmp_path / "peer.json").read_text())
    assert set(result["sides"]) == {"ours", "mamba3-jax"} and result["logits_rel_l2_with_softplus_A"] < 1e-5
    assert all(np.isfinite(side["loss"]) and side["step_ms"] > 0 for side in result["sides"].values())
    assert "with its A activation set to" in (tmp_path / "peer.md").read_text()
