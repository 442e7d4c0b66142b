"""Graph-Mamba's PyTorch side driven from numpy: our padded graph batches turned into PyG-style inputs, the task
losses, and loss + gradients in train or eval mode (optionally under bf16 autocast) for the parity harness.

Padded batch keys (``jax_mamba.data.graphs.packing``): node_feat (N, F), edge_feat (E, Fe) when the data has edge
features, senders/receivers (E,), node_graph (N,), node_mask (N,), edge_mask (E,), graph_mask (B,), eigvecs /
eigvals / eig_mask (N, K) with LapPE, node_labels (N,) or graph_labels (B,) / (B, T); optionally order_noise
(n_layers, orderings, N) and eig_signs (K,). Real nodes, edges and graphs come first, so stripping the padding is
slicing."""

from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F

from jax_mamba.configs.schema import GraphMambaConfig
from torch_reference._tensors import state_to_numpy, to_numpy
from torch_reference.backend import Reference
from torch_reference.graph_mamba_layers import GraphInputs, GraphMambaNet
from torch_reference.torch_model import TorchModel


def _tensor(value: np.ndarray, device: str) -> torch.Tensor:
    """int -> int64 (ids, labels), float -> float32."""
    value = np.ascontiguousarray(value)
    dtype = torch.int64 if np.issubdtype(value.dtype, np.integer) else torch.float32
    return torch.from_numpy(value).to(device=device, dtype=dtype)


def _lap_pe(batch: Mapping[str, np.ndarray], rows: int, device: str) -> tuple[torch.Tensor | None, ...]:
    """(eigvecs (rows, K), eigvals (rows, K, 1)) of the first ``rows`` node rows, NaN where eig_mask is 0 (a graph's
    missing frequencies, padding rows), as GraphGPS stores them; (None, None) without LapPE."""
    if "eigvecs" not in batch:
        return None, None
    missing = np.asarray(batch["eig_mask"][:rows]) == 0
    eigvecs = _tensor(np.where(missing, np.nan, batch["eigvecs"][:rows]).astype(np.float32), device)
    eigvals = _tensor(np.where(missing, np.nan, batch["eigvals"][:rows])[..., None].astype(np.float32), device)
    return eigvecs, eigvals


def graph_inputs(batch: Mapping[str, np.ndarray], device: str = "cpu") -> GraphInputs:
    """Our padded batch (numpy) -> the unpadded PyG-style ``GraphInputs`` on ``device``. LapPE entries of missing
    frequencies (eig_mask 0) become NaN, as GraphGPS stores them."""
    n, e = int(np.sum(batch["node_mask"])), int(np.sum(batch["edge_mask"]))
    graphs = int(np.sum(batch["graph_mask"]))
    edge_index = np.stack([batch["senders"][:e], batch["receivers"][:e]])
    eigvecs, eigvals = _lap_pe(batch, n, device)
    labels = batch["node_labels"][:n] if "node_labels" in batch else batch["graph_labels"][:graphs]
    noise = batch.get("order_noise")
    return GraphInputs(
        x=_tensor(batch["node_feat"][:n], device),
        edge_index=_tensor(edge_index, device),
        edge_attr=_tensor(batch["edge_feat"][:e], device) if "edge_feat" in batch else None,
        batch=_tensor(batch["node_graph"][:n], device),
        num_graphs=graphs,
        eigvecs=eigvecs,
        eigvals=eigvals,
        labels=_tensor(labels, device),
        order_noise=None if noise is None else _tensor(np.asarray(noise)[:, :, :n], device),
        eig_signs=_tensor(batch["eig_signs"], device) if "eig_signs" in batch else None,
    )


def padded_graph_inputs(batch: Mapping[str, np.ndarray], device: str = "cpu") -> GraphInputs:
    """Our padded batch (numpy) -> ``GraphInputs`` of every row, padding included, with the masks and slot table:
    the fixed shapes of our bucket, for a CUDA graph. LapPE entries where eig_mask is 0 (padding rows too) are NaN."""
    eigvecs, eigvals = _lap_pe(batch, len(batch["node_mask"]), device)
    labels = batch["node_labels"] if "node_labels" in batch else batch["graph_labels"]
    return GraphInputs(
        x=_tensor(batch["node_feat"], device),
        edge_index=_tensor(np.stack([batch["senders"], batch["receivers"]]), device),
        edge_attr=_tensor(batch["edge_feat"], device) if "edge_feat" in batch else None,
        batch=_tensor(batch["node_graph"], device),
        num_graphs=int(batch["slots"].shape[0]),
        eigvecs=eigvecs,
        eigvals=eigvals,
        labels=_tensor(labels, device),
        order_noise=_tensor(batch["order_noise"], device) if "order_noise" in batch else None,
        eig_signs=_tensor(batch["eig_signs"], device) if "eig_signs" in batch else None,
        node_mask=_tensor(np.asarray(batch["node_mask"], np.float32), device),
        edge_mask=_tensor(np.asarray(batch["edge_mask"], np.float32), device),
        graph_mask=_tensor(np.asarray(batch["graph_mask"], np.float32), device),
        slots=_tensor(batch["slots"], device),
    )


def _masked_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (values * weights).sum() / weights.sum().clamp(min=1e-12)


def graph_loss(
    out: torch.Tensor,
    labels: torch.Tensor,
    task_type: str,
    label_smoothing: float = 0.0,
    class_weighted: bool = False,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean loss of float32 outputs (rows, outputs): multiclass cross-entropy (label smoothing) over the rows,
    multilabel BCE with logits or regression L1 over every (row, target) entry. ``class_weighted``: GraphGPS's
    weighted_cross_entropy, class c weighted by (rows - rows of class c) / rows in this batch (absent classes 0).
    ``mask`` (rows,): 1 on the real rows of a padded batch, whose loss is the unpadded rows' (no host sync)."""
    if mask is None:
        mask = torch.ones(out.shape[0], device=out.device)
    if task_type == "multiclass":
        weight = None
        if class_weighted:
            per_class = torch.zeros(out.shape[1], device=out.device).index_add_(0, labels, mask.float())
            weight = (mask.sum() - per_class) / mask.sum()
        rows = F.cross_entropy(out, labels, weight=weight, label_smoothing=label_smoothing, reduction="none")
        row_weight = mask if weight is None else mask * weight[labels]
        return (rows * mask).sum() / row_weight.sum().clamp(min=1e-12)
    if task_type == "multilabel":
        entries = F.binary_cross_entropy_with_logits(out, labels.float(), reduction="none")
        return _masked_mean(entries, mask[:, None].expand_as(entries))
    if task_type == "regression":
        entries = F.l1_loss(out, labels.float(), reduction="none")
        return _masked_mean(entries, mask[:, None].expand_as(entries))
    raise ValueError(f"task_type: expected multiclass, multilabel or regression, got {task_type!r}")


class TorchGraphMamba(TorchModel):
    def __init__(self, ref: Reference, cfg: GraphMambaConfig, seed: int = 0):
        torch.manual_seed(seed)
        self.ref, self.cfg = ref, cfg
        self.model = GraphMambaNet(cfg, ref.Mamba).to(ref.device)

    def loss_and_grads(
        self,
        batch: Mapping[str, np.ndarray],
        compute_dtype: str = "float32",
        *,
        train: bool = True,
        label_smoothing: float = 0.0,
    ) -> tuple[np.ndarray, float, dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(outputs of the real rows: (n nodes, out) or (G graphs, out), mean loss, {param name: grad},
        buffers after the forward) for one padded batch. Parameters no output depends on (the last layer's edge
        BatchNorm) get zero gradients, not None. The model's buffers are restored afterwards: calls do not compound."""
        before = {k: v.clone() for k, v in self.model.named_buffers()}
        self.model.train(train)
        self.model.zero_grad(set_to_none=True)
        g = graph_inputs(batch, self.ref.device)
        with torch.autocast(self.ref.device, dtype=torch.bfloat16, enabled=compute_dtype == "bfloat16"):
            out = self.model(g)
        loss = graph_loss(out.float(), g.labels, self.cfg.task_type, label_smoothing, self.cfg.class_weighted_loss)
        loss.backward()
        for p in self.model.parameters():  # dead parameters: a zero gradient, as JAX gives (AdamW then decays them)
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = {k: to_numpy(p.grad) for k, p in self.named_parameters().items()}
        buffers = {k: state_to_numpy(v) for k, v in self.model.named_buffers()}
        with torch.no_grad():
            for k, v in self.model.named_buffers():
                v.copy_(before[k])
        return to_numpy(out), loss.item(), grads, buffers

    def set_running_statistics(self, batch: Mapping[str, np.ndarray]) -> None:
        """Every BatchNorm's running statistics := those of a training-mode forward on ``batch`` (unbiased
        variance, as torch keeps them); num_batches_tracked stays as it was."""
        norms = [m for m in self.model.modules() if isinstance(m, torch.nn.BatchNorm1d)]
        saved = [(m.momentum, m.num_batches_tracked.clone()) for m in norms]
        for m in norms:
            m.momentum = 1.0
        self.model.train()
        with torch.no_grad():
            self.model(graph_inputs(batch, self.ref.device))
            for m, (momentum, count) in zip(norms, saved, strict=True):
                m.momentum = momentum
                m.num_batches_tracked.copy_(count)
