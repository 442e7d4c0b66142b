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


def graph_inputs(batch: Mapping[str, np.ndarray], device: str = "cpu") -> GraphInputs:
    """Our padded batch (numpy) -> the unpadded PyG-style ``GraphInputs`` on ``device``. LapPE entries of missing
    frequencies (eig_mask 0) become NaN, as GraphGPS stores them."""
    n, e = int(np.sum(batch["node_mask"])), int(np.sum(batch["edge_mask"]))
    graphs = int(np.sum(batch["graph_mask"]))
    edge_index = np.stack([batch["senders"][:e], batch["receivers"][:e]])
    eigvecs = eigvals = None
    if "eigvecs" in batch:
        missing = np.asarray(batch["eig_mask"][:n]) == 0
        eigvecs = _tensor(np.where(missing, np.nan, batch["eigvecs"][:n]).astype(np.float32), device)
        eigvals = _tensor(np.where(missing, np.nan, batch["eigvals"][:n])[..., None].astype(np.float32), device)
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


def graph_loss(
    out: torch.Tensor,
    labels: torch.Tensor,
    task_type: str,
    label_smoothing: float = 0.0,
    class_weighted: bool = False,
) -> torch.Tensor:
    """Mean loss of float32 outputs (rows, outputs): multiclass cross-entropy (label smoothing) over the rows,
    multilabel BCE with logits or regression L1 over every (row, target) entry. ``class_weighted``: GraphGPS's
    weighted_cross_entropy, class c weighted by (rows - rows of class c) / rows in this batch (absent classes 0)."""
    if task_type == "multiclass":
        weight = None
        if class_weighted:
            per_class = torch.bincount(labels, minlength=out.shape[1]).float()
            weight = (labels.numel() - per_class) / labels.numel()
        return F.cross_entropy(out, labels, weight=weight, label_smoothing=label_smoothing)
    if task_type == "multilabel":
        return F.binary_cross_entropy_with_logits(out, labels.float())
    if task_type == "regression":
        return F.l1_loss(out, labels.float())
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
