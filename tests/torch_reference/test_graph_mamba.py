"""Graph-Mamba's PyTorch side: padded batches to PyG-style inputs, the task losses, the reference's orderings and
sign flips drawn when the batch carries none, and the training-mode BatchNorm update undone after a run."""

import numpy as np
import pytest

from compare.parity.graph_batch import random_graph_batch, random_order_noise
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


def _padded_and_unpadded(model, batch, task_level: str, train: bool, class_weighted: bool = False):
    """(outputs of the real rows, loss, grads, buffers) from the unpadded and the padded inputs of one batch."""
    from torch_reference.graph_mamba import padded_graph_inputs

    runs = []
    for make in (graph_inputs, padded_graph_inputs):
        model.load_state_dict(state := {k: v.clone() for k, v in model.state_dict().items()})
        model.train(train)
        model.zero_grad(set_to_none=True)
        g = make(batch)
        out = model(g)
        rows = None if not g.padded else (g.node_mask if task_level == "node" else g.graph_mask)
        task = "multiclass" if g.labels.dtype == torch.int64 else "regression"
        loss = graph_loss(out.float(), g.labels, task, 0.1, class_weighted, rows)
        loss.backward()
        real = out if not g.padded else out[rows > 0]
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        buffers = {k: v.clone() for k, v in model.state_dict().items()}
        model.load_state_dict(state)
        runs.append((real.detach(), loss.detach(), grads, buffers))
    return runs


@pytest.mark.parametrize(
    ("overrides", "task_level"),
    [
        ([], "node"),
        (["--model.task_level=graph", "--model.task_type=regression", "--model.num_outputs=2",
          "--model.node_feature_kind=categorical", "--model.node_vocab=[4,3]", "--model.lap_pe_dim=0"], "graph"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("train", [True, False])
def test_padded_inputs_give_the_unpadded_results(cpu_reference, rng, overrides, task_level, train):
    """Every row of our bucket (the fixed shapes a CUDA graph replays): the real rows' outputs, the loss (masked
    means; class weights from the real labels), every gradient and the BatchNorm running statistics are the
    unpadded run's, in training (one ordering, LapPE signs) and eval (three orderings averaged)."""
    from torch_reference.graph_mamba import TorchGraphMamba, padded_graph_inputs
    from torch_reference.graph_mamba_layers import GraphMambaNet

    cfg = load_config("graph-mamba-tiny", ["--model.dim_hidden=16", "--model.eval_orderings=3", *overrides]).model
    model: GraphMambaNet = TorchGraphMamba(cpu_reference, cfg, seed=2).model
    batch = random_graph_batch(rng, cfg, 3, 9, lap_pe_freqs=6 if cfg.lap_pe_dim else 0)
    assert batch["node_mask"].sum() < len(batch["node_mask"]) and batch["graph_mask"].sum() < len(batch["graph_mask"])
    batch["order_noise"] = random_order_noise(rng, cfg, 1 if train else 3, len(batch["node_mask"]))
    if cfg.lap_pe_dim:
        batch["eig_signs"] = np.where(rng.uniform(size=6) < 0.5, -1.0, 1.0).astype(np.float32)
    g = padded_graph_inputs(batch)
    assert g.padded and g.slots.shape[0] == len(batch["graph_mask"]) and g.x.shape[0] == len(batch["node_mask"])
    class_weighted = task_level == "node"
    (out, loss, grads, buffers), (p_out, p_loss, p_grads, p_buffers) = _padded_and_unpadded(
        model, batch, task_level, train, class_weighted
    )
    assert torch.isfinite(p_out).all() and torch.isfinite(p_loss)
    torch.testing.assert_close(p_out, out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(p_loss, loss, rtol=1e-5, atol=1e-6)
    assert p_grads.keys() == grads.keys() and len(grads) > 10
    for name, grad in grads.items():
        torch.testing.assert_close(p_grads[name], grad, rtol=1e-3, atol=1e-5, msg=name)
    for name, value in buffers.items():
        torch.testing.assert_close(p_buffers[name], value, rtol=1e-4, atol=1e-6, msg=name)
    if train:  # the running statistics moved (and both runs moved them alike, above)
        start = model.state_dict()["layers.0.norm2.running_mean"]
        assert not torch.equal(buffers["layers.0.norm2.running_mean"], start)


def test_padded_losses_count_the_real_rows_only():
    """graph_loss with a row mask: what the unmasked loss of the real rows alone gives, whatever the padding rows
    hold (NaN-free garbage), for each task and class weighting."""
    gen = torch.Generator().manual_seed(0)
    out = torch.randn(7, 3, generator=gen)
    mask = torch.tensor([1, 1, 0, 1, 1, 0, 0], dtype=torch.float32)
    real = mask > 0
    labels = torch.tensor([0, 2, 1, 2, 1, 0, 0])
    garbage = out.clone()
    garbage[~real] = 1e3
    for weighted in (False, True):
        expected = graph_loss(out[real], labels[real], "multiclass", 0.1, weighted)
        torch.testing.assert_close(graph_loss(garbage, labels, "multiclass", 0.1, weighted, mask), expected)
    targets = torch.randn(7, 3, generator=gen)
    for task in ("multilabel", "regression"):
        t = targets.sigmoid().round() if task == "multilabel" else targets
        torch.testing.assert_close(graph_loss(garbage, t, task, mask=mask), graph_loss(out[real], t[real], task))
