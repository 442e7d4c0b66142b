"""Graph-Mamba weight conversion: exact round trips (parameters and batch statistics) for every encoder and head
kind, the names and shapes of the PyTorch model (torch_reference.graph_mamba_layers), strict errors both ways."""

import numpy as np
import pytest

from jax_mamba.configs import load_config
from tests.graph_configs import CATEGORICAL_MULTILABEL
from tests.torch_reference import conversion_checks as checks

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
from jax_mamba.checkpoints.convert_graph_mamba import (
    ConversionError,
    expected_variables,
    from_torch_state_dict,
    split_variables,
    to_torch_state_dict,
    torch_name,
)

BASE = ["--model.dim_hidden=16", "--model.n_layers=2"]
CONFIGS = {  # dense nodes + LapPE + DummyEdge, node head of 2 layers (graph-mamba-tiny's kinds)
    "dense-lappe-node": load_config("graph-mamba-tiny", BASE).model,
    "categorical-graph": load_config("graph-mamba-tiny", [*BASE, *CATEGORICAL_MULTILABEL]).model,
    "dense-edges-lappe1-graph": load_config(  # dense edges, one-layer DeepSet, expand 2, 3-layer graph head
        "graph-mamba-tiny",
        [
            *BASE,
            "--model.edge_feature_kind=dense",
            "--model.edge_in_dim=3",
            "--model.lap_pe_dim=4",
            "--model.lap_pe_layers=1",
            "--model.expand=2",
            "--model.task_level=graph",
            "--model.task_type=regression",
            "--model.num_outputs=2",
            "--model.head_layers=3",
        ],
    ).model,
}


def random_variables(cfg, rng) -> dict:
    return checks.random_variables(expected_variables(cfg), rng)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_round_trip_is_exact(rng, name):
    cfg = CONFIGS[name]
    variables = random_variables(cfg, rng)
    state = to_torch_state_dict(variables, cfg)
    assert state["layers.0.local_model.A.weight"].shape == (16, 16)
    assert state["layers.1.self_attn.in_proj.weight"].shape == (2 * 16 * cfg.expand, 16)  # (out, in)
    assert state["layers.1.self_attn.conv1d.weight"].shape == (16 * cfg.expand, 1, cfg.d_conv)
    assert state["layers.0.norm2.num_batches_tracked"].dtype == np.int64
    np.testing.assert_array_equal(state["post_mp.layers.0.weight"], variables["post_mp.layers.0.kernel"].T)
    checks.assert_same_variables(from_torch_state_dict(state, cfg), variables)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_names_and_shapes_match_the_torch_model(cpu_reference, name):
    from torch_reference.graph_mamba import TorchGraphMamba

    cfg = CONFIGS[name]
    theirs = TorchGraphMamba(cpu_reference, cfg, seed=3).state_dict()
    checks.assert_same_variables(to_torch_state_dict(from_torch_state_dict(theirs, cfg), cfg), theirs)


def test_table_rules():
    assert torch_name("encoder.edge_encoder.embedding") == "encoder.edge_encoder.embedding.weight"  # DummyEdge
    assert torch_name("encoder.node_encoder.embeddings.2.embedding") == "encoder.node_encoder.embeddings.2.weight"
    assert torch_name("encoder.edge_encoder.embeddings.0.embedding") == "encoder.edge_encoder.embeddings.0.weight"
    assert torch_name("encoder.lap_pe.linear_A.kernel") == "encoder.lap_pe.linear_A.weight"
    assert torch_name("layers.3.local_model.E.kernel") == "layers.3.local_model.E.weight"
    assert torch_name("layers.0.self_attn.conv1d.weight") == "layers.0.self_attn.conv1d.weight"
    assert torch_name("layers.0.self_attn.A_log") == "layers.0.self_attn.A_log"
    assert torch_name("layers.1.norm1_attn.running_var") == "layers.1.norm1_attn.running_var"


def test_split_variables_separates_batch_statistics(rng):
    cfg = CONFIGS["categorical-graph"]
    params, state = split_variables(random_variables(cfg, rng), cfg)
    assert state and all(k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in state)
    assert len(state) == cfg.n_layers * 5 * 3  # bn_node_x, bn_edge_e, norm1_local, norm1_attn, norm2
    assert "encoder.node_encoder.embeddings.1.embedding" in params and not params.keys() & state.keys()


def test_strict_errors_list_the_keys(rng):
    cfg = CONFIGS["dense-lappe-node"]
    state = to_torch_state_dict(random_variables(cfg, rng), cfg)
    missing = {k: v for k, v in state.items() if k != "layers.1.norm2.running_mean"}
    with pytest.raises(ConversionError, match=r"missing \['layers.1.norm2.running_mean'\]"):
        from_torch_state_dict(missing, cfg)
    with pytest.raises(ConversionError, match=r"unexpected \['post_mp.layers.2.weight'\]"):
        from_torch_state_dict({**state, "post_mp.layers.2.weight": np.zeros((6, 16), np.float32)}, cfg)
    wrong = {**state, "encoder.lap_pe.linear_A.weight": np.zeros((8, 2), np.float32)}
    with pytest.raises(ConversionError, match=r"linear_A.weight: \(8, 2\) does not fit encoder.lap_pe.linear_A.kernel"):
        from_torch_state_dict(wrong, cfg)
    with pytest.raises(ConversionError, match="missing"):  # a categorical model's state dict does not fit a dense one
        from_torch_state_dict(to_torch_state_dict(random_variables(CONFIGS["categorical-graph"], rng), cfg), cfg)
    variables = random_variables(cfg, rng)
    variables.pop("encoder.edge_encoder.embedding")
    with pytest.raises(ConversionError, match=r"missing \['encoder.edge_encoder.embedding'\]"):
        to_torch_state_dict(variables, cfg)
    variables = random_variables(cfg, rng)
    variables["layers.0.self_attn.D"] = np.zeros(3, np.float32)
    with pytest.raises(ConversionError, match=r"layers.0.self_attn.D: \(3,\) != \(16,\)"):
        to_torch_state_dict(variables, cfg)
