"""compare.parity.mamba3_jax_peer on the CPU: mamba3-jax loads our weights strictly and its logits equal ours at
each A activation (heavy_tail as it is published, softplus with its activation swapped; SISO with groups and the
output norm, and MIMO), differ at the other, and both training steps run; the report's files."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity import mamba3_jax_peer as peer
from compare.parity.tolerances import rel_l2
from jax_mamba.configs import load_config
from jax_mamba.configs.schema import MAMBA3_A_ACTIVATIONS


@pytest.mark.parametrize(
    "overrides",
    [
        ["--model.ssm_cfg.is_outproj_norm=true", "--model.ssm_cfg.ngroups=2"],
        ["--model.ssm_cfg.is_mimo=true", "--model.ssm_cfg.mimo_rank=2", "--model.n_layer=1"],
    ],
    ids=["siso-norm-groups", "mimo"],
)
def test_the_peer_equals_ours_at_each_A_activation(overrides):
    logits = {}
    for activation in MAMBA3_A_ACTIVATIONS:
        fixed = ["--model.compute_dtype=float32", f"--model.ssm_cfg.A_activation={activation}"]
        cfg = load_config("mamba3-tiny", [*overrides, *fixed]).model
        tokens = jnp.asarray(np.random.default_rng(3).integers(0, cfg.vocab_size, (2, 37)), jnp.int32)
        ours, theirs = peer.build_pair(cfg, seed=3)
        logits[activation] = np.asarray(peer.our_logits(ours, tokens))
        with peer.as_peer(activation):
            assert rel_l2(np.asarray(peer.peer_logits(theirs, tokens)), logits[activation]) < 1e-5
    assert np.isfinite(logits["softplus"]).all()
    assert rel_l2(logits["heavy_tail"], logits["softplus"]) > 1e-2


def test_command_writes_both_sides(tmp_path):
    out = tmp_path / "peer"
    assert (
        peer.main(
            ["--config", "mamba3-tiny", "--batch_size", "2", "--seq_len", "32", "--steps", "2", "--out", str(out)]
        )
        == 0
    )
    result = json.loads((tmp_path / "peer.json").read_text())
    assert set(result["sides"]) == {"ours", "mamba3-jax"}
    assert set(result["logits_rel_l2"]) == set(MAMBA3_A_ACTIVATIONS)
    assert all(value < 1e-5 for value in result["logits_rel_l2"].values())
    assert all(np.isfinite(side["loss"]) and side["step_ms"] > 0 for side in result["sides"].values())
    assert "at each A activation: softplus" in (tmp_path / "peer.md").read_text()
