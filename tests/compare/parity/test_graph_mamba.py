"""JAX vs PyTorch Graph-Mamba parity on the CPU (torch_geometric + mamba-ssm's Mamba on its CPU fallback), float32:
logits, loss, every parameter gradient in eval (averaged orderings, running statistics) and training mode (one
ordering, LapPE sign flips, batch statistics and their running update), one AdamW step; the graph-level
categorical/multilabel variant forward; the ops checked at the global Mamba's shapes."""

import numpy as np
import pytest
from flax import nnx

import compare.parity.check as parity
from compare.parity.check import format_table, model_parity
from jax_mamba.configs import load_config
from jax_mamba.models import GraphMamba, ParamLayout
from tests.graph_configs import CATEGORICAL_MULTILABEL

pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


def _failures(rows):
    return format_table([r for r in rows if not r.passed]) if not all(r.passed for r in rows) else ""


TINY = ["--model.compute_dtype=float32", "--model.dim_hidden=16", "--model.eval_orderings=3", "--label_smoothing=0.1"]


def test_graph_mamba_parity(cpu_reference, rng):
    """graph-mamba-tiny's kinds (dense nodes, LapPE, DummyEdge, 2-layer node head), 2 layers, dropout 0.1 switched
    off by the driver; 3 graphs of 2..10 nodes in 4 slots."""
    cfg = load_config("graph-mamba-tiny", [*TINY, "--model.dropout=0.1"])
    rows = model_parity(cpu_reference, cfg, batch=3, seq_len=10, seed=int(rng.integers(1 << 30)))
    names = {r.name for r in rows}
    assert {"eval logits", "train logits", "eval loss", "train loss"} <= names
    grads = [n for n in names if n.startswith("train grad ")]
    assert len(grads) == sum(n.startswith("eval grad ") for n in names) == sum(n.startswith("adamw ") for n in names)
    n_params = len(ParamLayout.split(nnx.eval_shape(lambda: GraphMamba(cfg.model, rngs=nnx.Rngs(0))))[1])
    assert len(grads) == n_params
    assert "train grad encoder.lap_pe.linear_A.weight" in names and "train grad layers.1.self_attn.A_log" in names
    assert sum(n.startswith("train state ") and n.endswith("running_var") for n in names) == 2 * 5
    assert all(r.passed for r in rows), _failures(rows)


def test_graph_level_categorical_forward_parity(cpu_reference, rng):
    """Summed embeddings for nodes and edges, no LapPE, mean pooling over real graphs (an empty slot masked), a
    multilabel head: logits and BCE loss in both modes."""
    cfg = load_config("graph-mamba-tiny", [*TINY, "--model.n_layers=1", *CATEGORICAL_MULTILABEL])
    rows = model_parity(cpu_reference, cfg, batch=4, seq_len=8, seed=int(rng.integers(1 << 30)), gradients=False)
    assert {r.name for r in rows} == {"eval logits", "train logits", "eval loss", "train loss"}
    assert all(r.passed for r in rows), _failures(rows)


def test_class_weighted_loss_parity(cpu_reference, rng):
    """GraphGPS's weighted cross-entropy (graph-mamba-cluster's loss) on both sides: loss in both modes."""
    overrides = [*TINY, "--label_smoothing=0", "--model.n_layers=1", "--model.class_weighted_loss=true"]
    cfg = load_config("graph-mamba-tiny", overrides)
    rows = model_parity(cpu_reference, cfg, batch=4, seq_len=12, seed=int(rng.integers(1 << 30)), gradients=False)
    assert {"eval loss", "train loss"} <= {r.name for r in rows}
    assert all(r.passed for r in rows), _failures(rows)


def test_op_parity_runs_at_the_global_mambas_shapes(monkeypatch, cpu_reference):
    calls = []
    monkeypatch.setattr(parity, "_selective_scan_rows", lambda *args, **kw: calls.append(("scan", args[3:], kw)) or [])
    monkeypatch.setattr(parity, "_causal_conv1d_rows", lambda *args: calls.append(("conv", args[3:], {})) or [])
    cfg = load_config("graph-mamba-tiny", ["--model.expand=2", "--model.d_state=8", "--model.d_conv=3"]).model
    parity.op_parity(cpu_reference, cfg, batch=5, seq_len=11)
    d = 2 * cfg.dim_hidden
    assert calls == [("scan", (5, 11, d, 8), {"gated": True}), ("conv", (5, 11, d, 3), {})]


def test_side_gives_each_mode_its_orderings(cpu_reference, rng):
    from compare.parity.families import SIDES, without_randomness

    cfg = without_randomness(load_config("graph-mamba-tiny", [*TINY, "--model.dropout=0.2"]))
    assert cfg.model.dropout == 0.0
    side = SIDES["graph_mamba"](cpu_reference, cfg, seed=0)
    data = side.make_batch(rng, 2, 6)
    num_nodes = data["node_mask"].shape[0]
    train, evaluation = side.batch_for("train", data), side.batch_for("eval", data)
    assert train["order_noise"].shape == (2, 1, num_nodes) and evaluation["order_noise"].shape == (2, 3, num_nodes)
    assert "train_order_noise" not in train and "train_order_noise" in data
    assert set(np.unique(data["eig_signs"])) <= {-1.0, 1.0} and data["eig_signs"].shape == (6,)
    rows = side.real_rows(train, np.arange(num_nodes)[:, None])
    assert rows[:, 0].tolist() == list(range(int(data["node_mask"].sum())))
