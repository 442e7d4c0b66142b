"""Graph-Mamba's PyTorch side: padded batches to PyG-style inputs, the task losses, the reference's orderings and
sign flips drawn when the batch carries none, and the training-mode BatchNorm update undone after a run."""

import numpy as np
import pytest

from compare.graph_batch import random_graph_batch, random_order_noise
from jax_mamba.configs import load_config

torch = pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
from torch_reference.graph_mamba import graph_inputs, graph_loss  # noqa: E402

CFG = load_config("graph-mamba-tiny", ["--model.dim_hidden=16", "--model.eval_orderings=3"]).model


def test_graph_inputs_strip_the_padding(rng):
    batch = random_graph_batch(rng, CFG, 3, 5, lap_pe_freqs=6)  # graphs of at most 5 nodes: fewer than 6 frequencies
    n, e = int(batch["node_mask"].sum()), int(batch["edge_mask"].sum())
    assert n < len(batch["node_mask"]) and batch["graph_mask"].tolist() == [1, 1, 1, 0]
    g = graph_inputs(batch)
    assert g.x.shape == (n, 7) and g.x.dtype == torch.float32 and g.num_graphs == 3
    assert g.edge_index.shape == (2, e) and g.edge_index.dtype == torch.int64 and int(g.edge_index.max()) < n
    np.testing.assert_array_equal(g.edge_index[0].numpy(), batch["senders"][:e])
    np.testing.assert_array_equal(g.batch.numpy(), batch["node_graph"][:n])
    assert g.labels.shape == (n,) and g.labels.dtype == torch.int64 and g.edge_attr is None
    missing = batch["eig_mask"][:n] == 0  # NaN at the frequencies a graph lacks, as GraphGPS stores them
    assert missing.any() and g.eigvals.shape == (n, 6, 1)
    np.testing.assert_array_equal(np.isnan(g.eigvecs.numpy()), missing)
    np.testing.assert_array_equal(np.isnan(g.eigvals.numpy()[..., 0]), missing)
    np.testing.assert_array_equal(g.eigvecs.numpy()[~missing], batch["eigvecs"][:n][~missing])
    assert g.order_noise is None and g.eig_signs is None
    batch["order_noise"] = random_order_noise(rng, CFG, 2, len(batch["node_mask"]))
    assert graph_inputs(batch).order_noise.shape == (CFG.n_layers, 2, n)


def test_graph_inputs_of_a_graph_task_keep_the_real_graphs(rng):
    overrides = ["--model.task_level=graph", "--model.task_type=regression", "--model.num_outputs=2"]
    overrides += ["--model.node_feature_kind=categorical", "--model.node_vocab=[4,3]", "--model.lap_pe_dim=0"]
    cfg = load_config("graph-mamba-tiny", overrides).model
    batch = random_graph_batch(rng, cfg, 2, 6, lap_pe_freqs=0)
    g = graph_inputs(batch)
    assert g.labels.shape == (2, 2) and g.labels.dtype == torch.float32 and g.x.dtype == torch.int64
    assert g.eigvecs is None
    np.testing.assert_array_equal(g.labels.numpy(), batch["graph_labels"][:2])


def test_losses_are_the_task_means():
    out = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, -3.0]])
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    x, t = out.numpy().astype(np.float64), targets.numpy()
    bce = np.mean(np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x))))
    np.testing.assert_allclose(graph_loss(out, targets, "multilabel").item(), bce, rtol=1e-6)
    np.testing.assert_allclose(graph_loss(out, targets, "regression").item(), np.mean(np.abs(x - t)), rtol=1e-6)
    labels = torch.tensor([0, 2])
    log_p = x - np.log(np.exp(x).sum(-1, keepdims=True))
    smooth = 0.1
    ce = np.mean(-(1 - smooth) * log_p[[0, 1], [0, 2]] - smooth * log_p.mean(-1))
    np.testing.assert_allclose(graph_loss(out, labels, "multiclass", smooth).item(), ce, rtol=1e-6)
    with pytest.raises(ValueError, match="task_type"):
        graph_loss(out, labels, "ranking")


def test_class_weighted_cross_entropy_is_the_weighted_mean(rng):
    x = rng.normal(size=(9, 4))
    labels = np.array([0, 0, 0, 0, 1, 1, 3, 3, 3])  # class 2 absent
    weight = (9 - np.bincount(labels, minlength=4)) / 9  # 5/9, 7/9, (absent), 6/9
    log_p = x - np.log(np.exp(x).sum(-1, keepdims=True))
    expected = np.sum(-weight[labels] * log_p[np.arange(9), labels]) / np.sum(weight[labels])
    out = graph_loss(torch.tensor(x, dtype=torch.float32), torch.tensor(labels), "multiclass", class_weighted=True)
    np.testing.assert_allclose(out.item(), expected, rtol=1e-6)


def test_runs_draw_orderings_and_restore_buffers(cpu_reference, rng):
    from torch_reference.graph_mamba import TorchGraphMamba

    model = TorchGraphMamba(cpu_reference, CFG, seed=1)
    batch = random_graph_batch(rng, CFG, 3, 9, lap_pe_freqs=6)
    n = int(batch["node_mask"].sum())
    before = model.state_dict()
    out, loss, grads, buffers = model.loss_and_grads(batch, train=True)
    assert out.shape == (n, CFG.num_outputs) and np.isfinite(loss)
    assert grads.keys() == dict(model.model.named_parameters()).keys()
    assert not np.any(grads["layers.1.local_model.bn_edge_e.weight"])  # dead in the last layer: zeros, not None
    assert np.any(grads["layers.0.local_model.bn_edge_e.weight"])
    assert buffers["layers.0.norm2.num_batches_tracked"] == 1
    assert not np.allclose(buffers["layers.0.norm2.running_mean"], before["layers.0.norm2.running_mean"])
    after = model.state_dict()
    assert all(np.array_equal(after[k], before[k]) for k in before)
    draws = [model.loss_and_grads(batch, train=False)[0] for _ in range(2)]  # eval: random orderings, averaged
    assert draws[0].shape == out.shape and not np.allclose(draws[0], draws[1])
    batch["order_noise"] = random_order_noise(rng, CFG, 3, len(batch["node_mask"]))
    fixed = [model.loss_and_grads(batch, train=False)[0] for _ in range(2)]  # injected noise: repeatable
    np.testing.assert_array_equal(fixed[0], fixed[1])
