"""Graph-Mamba (bowang-lab/Graph-Mamba's ``GPSModel``, layer type ``CustomGatedGCN+Mamba_Hybrid_Degree_Noise``) in
PyTorch on torch_geometric primitives and mamba-ssm's ``Mamba``: the reference side of ``jax_mamba``'s GraphMamba.

Graph-Mamba is not packaged, so these modules are written here, following the reference's semantics on PyG-style
unpadded inputs (``GraphInputs``: node rows of all graphs concatenated, ``batch`` the graph of each node). Module
names mirror ``jax_mamba.models.graph_mamba`` so that weight conversion is a table (``convert_graph_mamba``).
The random choices (degree tie-breaking noise, LapPE sign flips) are drawn as the reference draws them unless the
inputs carry them, so both frameworks can see identical permutations.

Padded inputs (``GraphInputs`` with ``node_mask``, ``edge_mask``, ``graph_mask`` and ``slots``: our bucketed
batches, ``jax_mamba.data.graphs.packing``) run the same model at fixed shapes, as our side does, so that a CUDA
graph can replay it: batch norms take their statistics from the real rows only and write zeros on the others, the
global branch packs each graph's nodes through the slot table, pooling and losses count real rows only. A real
row's output is the unpadded run's."""

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import global_mean_pool
from torch_geometric.utils import degree, lexsort, scatter, to_dense_batch

from jax_mamba.configs.schema import GraphMambaConfig


@dataclass
class GraphInputs:
    """One batch of graphs, PyG style (no padding). n nodes, e edges, G graphs, K LapPE frequencies."""

    x: torch.Tensor  # (n, F) float32 dense features, or int64 categorical ids
    edge_index: torch.Tensor  # (2, e) int64: row 0 senders (source j), row 1 receivers (target i)
    edge_attr: torch.Tensor | None  # (e, Fe) float32 / int64, or None (DummyEdge)
    batch: torch.Tensor  # (n,) int64 graph of each node, sorted
    num_graphs: int  # G
    eigvecs: torch.Tensor | None  # (n, K) float32, NaN at a graph's missing frequencies (GraphGPS's EigVecs)
    eigvals: torch.Tensor | None  # (n, K, 1) float32, NaN there too (GraphGPS's EigVals)
    labels: torch.Tensor  # (n,) int64 node classes, (G,) int64 graph classes, or (G, T) float32 targets
    order_noise: torch.Tensor | None = None  # (n_layers, orderings, n) uniform [0, 1) tie-breaking noise
    eig_signs: torch.Tensor | None = None  # (K,) +-1, the training sign flip of each eigenvector
    # padded batches only (None otherwise); then n = N rows, e = E rows, G = B slots, ``batch`` B on padding rows
    node_mask: torch.Tensor | None = None  # (N,) float32, 1 on real nodes
    edge_mask: torch.Tensor | None = None  # (E,) float32, 1 on real edges
    graph_mask: torch.Tensor | None = None  # (B,) float32, 1 on real graphs
    slots: torch.Tensor | None = None  # (B, M) int64: graph b's m-th node position, else a padding row

    @property
    def padded(self) -> bool:
        return self.slots is not None


class MaskedBatchNorm1d(nn.BatchNorm1d):
    """``nn.BatchNorm1d`` (the same state-dict names) that, given ``mask`` (rows,) with 1 on real rows, takes its
    training statistics (float32; running variance unbiased over the real count) from the real rows only and writes
    zeros on the others, in training and eval alike. Without a mask: torch's own."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is None:
            return super().forward(x)
        keep = (mask > 0)[:, None]
        if not self.training:
            return torch.where(keep, super().forward(x), 0.0).to(x.dtype)
        count = keep.sum().float()
        mean = torch.where(keep, x.float(), 0.0).sum(0) / count
        centered = torch.where(keep, x.float() - mean, 0.0)
        var = centered.square().sum(0) / count
        out = centered * torch.rsqrt(var + self.eps) * self.weight + self.bias
        with torch.no_grad():
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(m * mean)
            self.running_var.mul_(1 - m).add_(m * var * count / (count - 1).clamp(min=1))
            self.num_batches_tracked.add_(1)
        return torch.where(keep, out, 0.0).to(x.dtype)


class CategoricalEncoder(nn.Module):
    """OGB's Atom/BondEncoder: int (rows, columns) -> the sum over columns of one Embedding each (xavier init)."""

    def __init__(self, vocab: list[int], dim: int):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(v, dim) for v in vocab)
        for embedding in self.embeddings:
            nn.init.xavier_uniform_(embedding.weight)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return sum(embedding(features[:, i]) for i, embedding in enumerate(self.embeddings))


class DummyEdgeEncoder(nn.Module):
    """GraphGPS's DummyEdge: one learned vector (an Embedding(1, dim)) for every edge."""

    def __init__(self, dim: int):
        super().__init__()
        self.embedding = nn.Embedding(1, dim)

    def forward(self, edge_index: torch.Tensor) -> torch.Tensor:
        return self.embedding(edge_index.new_zeros(edge_index.shape[1]))


class LapPEEncoder(nn.Module):
    """GraphGPS's LapPENodeEncoder, DeepSet model, no raw norm or post-MLP: (eigvec entry, eigval) per frequency
    -> linear_A -> ReLU -> [Linear -> ReLU] * (layers - 1), zeroed at missing (NaN) frequencies, summed: (n, pe)."""

    def __init__(self, pe_dim: int, layers: int):
        super().__init__()
        width = pe_dim if layers == 1 else 2 * pe_dim
        self.linear_A = nn.Linear(2, width)
        sizes = [width] * (layers - 1) + [pe_dim] if layers > 1 else []
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, eigvecs: torch.Tensor, eigvals: torch.Tensor, signs: torch.Tensor | None) -> torch.Tensor:
        """eigvecs (n, K), eigvals (n, K, 1) with NaN at missing frequencies; signs (K,) or None -> (n, pe)."""
        if signs is not None:
            eigvecs = eigvecs * signs[None, :]
        pos = torch.cat([eigvecs.unsqueeze(2), eigvals], dim=2)  # (n, K, 2)
        empty = torch.isnan(pos)
        pos = F.relu(self.linear_A(pos.masked_fill(empty, 0.0)))
        for layer in self.layers:
            pos = F.relu(layer(pos))
        return pos.masked_fill(empty[:, :, :1], 0.0).sum(dim=1)


class FeatureEncoder(nn.Module):
    """node_encoder (Linear or CategoricalEncoder to dim - pe) ++ lap_pe, and edge_encoder (Linear, Categorical or
    DummyEdge) to dim: (h (n, dim), e (e, dim))."""

    def __init__(self, cfg: GraphMambaConfig):
        super().__init__()
        dim, pe = cfg.dim_hidden, cfg.lap_pe_dim
        if cfg.node_feature_kind == "categorical":
            self.node_encoder = CategoricalEncoder(cfg.node_vocab, dim - pe)
        else:
            self.node_encoder = nn.Linear(cfg.node_in_dim, dim - pe)
        self.lap_pe = LapPEEncoder(pe, cfg.lap_pe_layers) if pe else None
        if cfg.edge_feature_kind == "categorical":
            self.edge_encoder = CategoricalEncoder(cfg.edge_vocab, dim)
        elif cfg.edge_feature_kind == "dense":
            self.edge_encoder = nn.Linear(cfg.edge_in_dim, dim)
        else:
            self.edge_encoder = DummyEdgeEncoder(dim)

    def forward(self, g: GraphInputs, signs: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.node_encoder(g.x)
        if self.lap_pe is not None:
            h = torch.cat([h, self.lap_pe(g.eigvecs, g.eigvals, signs)], dim=1)
        if isinstance(self.edge_encoder, DummyEdgeEncoder):
            return h, self.edge_encoder(g.edge_index)
        return h, self.edge_encoder(g.edge_attr)


class GatedGCNLayer(nn.Module):
    """GraphGPS's GatedGCNLayer (residual, no EquivStablePE): per edge j -> i, e_ij = D x_i + E x_j + C e;
    x_i' = A x_i + sum_j sigmoid(e_ij) B x_j / (sum_j sigmoid(e_ij) + 1e-6); BatchNorm, ReLU, dropout, residual."""

    def __init__(self, dim: int, dropout: float):
        super().__init__()
        self.A, self.B, self.C, self.D, self.E = (nn.Linear(dim, dim) for _ in range(5))
        self.bn_node_x = MaskedBatchNorm1d(dim)
        self.bn_edge_e = MaskedBatchNorm1d(dim)
        self.dropout = dropout

    def forward(
        self,
        x: torch.Tensor,
        e: torch.Tensor,
        edge_index: torch.Tensor,
        node_mask: torch.Tensor | None = None,
        edge_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (n, dim), e (e, dim), edge_index (2, e), masks of padded inputs or None -> (x, e) updated."""
        source, target = edge_index
        ax, bx, ce, dx, ex = self.A(x), self.B(x), self.C(e), self.D(x), self.E(x)
        e_ij = dx[target] + ex[source] + ce
        sigma = torch.sigmoid(e_ij)
        numerator = scatter(sigma * bx[source], target, 0, dim_size=x.shape[0], reduce="sum")
        denominator = scatter(sigma, target, 0, dim_size=x.shape[0], reduce="sum")
        h = F.relu(self.bn_node_x(ax + numerator / (denominator + 1e-6), node_mask))
        e_out = F.relu(self.bn_edge_e(e_ij, edge_mask))
        h = F.dropout(h, self.dropout, training=self.training)
        e_out = F.dropout(e_out, self.dropout, training=self.training)
        return x + h, e + e_out


class GPSLayer(nn.Module):
    """h_local = BN(GatedGCN(h, e)); h_attn = BN(h + dropout(Mamba over each graph's nodes sorted by out-degree +
    noise, back in node order, averaged over the orderings)); h = h_local + h_attn; h = BN(h + FFN(h))."""

    def __init__(self, dim: int, *, dropout: float, d_state: int, d_conv: int, expand: int, mamba_cls: type):
        super().__init__()
        self.local_model = GatedGCNLayer(dim, dropout)
        self.self_attn = mamba_cls(d_model=dim, d_state=d_state, d_conv=d_conv, expand=expand)
        self.norm1_local = MaskedBatchNorm1d(dim)
        self.norm1_attn = MaskedBatchNorm1d(dim)
        self.ff_linear1 = nn.Linear(dim, 2 * dim)
        self.ff_linear2 = nn.Linear(2 * dim, dim)
        self.norm2 = MaskedBatchNorm1d(dim)
        self.dropout_attn, self.ff_dropout1, self.ff_dropout2 = (nn.Dropout(dropout) for _ in range(3))

    def global_branch(self, h: torch.Tensor, g: GraphInputs, noise: torch.Tensor) -> torch.Tensor:
        """h (n, dim), noise (orderings, n) -> (n, dim): the reference's Mamba_Hybrid_Degree_Noise branch."""
        if g.padded:
            deg = scatter(g.edge_mask, g.edge_index[0], 0, dim_size=h.shape[0], reduce="sum")
        else:
            deg = degree(g.edge_index[0], h.shape[0]).to(torch.float)
        outputs = []
        for tie_break in noise:
            perm = lexsort([deg + tie_break, g.batch])  # graph first, then degree + noise, stable; padding last
            if g.padded:
                outputs.append(self._through_slots(h, perm, g))
                continue
            dense, mask = to_dense_batch(h[perm], g.batch[perm])
            outputs.append(self.self_attn(dense)[mask][torch.argsort(perm)])
        return sum(outputs) / len(outputs)

    def _through_slots(self, h: torch.Tensor, perm: torch.Tensor, g: GraphInputs) -> torch.Tensor:
        """The Mamba over each graph's nodes in the order ``perm`` (N,) at fixed shapes: packed (B, M, dim) through
        the slot table (graph b's m-th sorted node, padding rows after), then each node's output from its slot.
        Graph blocks stay in place under ``perm``, so sorted position p belongs to the graph of row p."""
        graphs, width = g.slots.shape
        out = self.self_attn(h[perm[g.slots]]).reshape(graphs * width, -1)
        position = torch.arange(h.shape[0], device=h.device)
        graph_of = g.batch.clamp(max=graphs - 1)
        slot = graph_of * width + position - g.slots[graph_of, 0]
        slot = torch.where(g.node_mask > 0, slot, position % (graphs * width))  # padding rows: any slot, spread
        inverse = torch.empty_like(perm).scatter_(0, perm, position)  # node -> its sorted position
        return out[slot[inverse]]

    def forward(
        self, h: torch.Tensor, e: torch.Tensor, g: GraphInputs, noise: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h_local, e = self.local_model(h, e, g.edge_index, g.node_mask, g.edge_mask)
        h_local = self.norm1_local(h_local, g.node_mask)
        h_attn = self.norm1_attn(h + self.dropout_attn(self.global_branch(h, g, noise)), g.node_mask)
        h = h_local + h_attn
        h = h + self.ff_dropout2(self.ff_linear2(self.ff_dropout1(F.relu(self.ff_linear1(h)))))
        if g.padded:  # padding rows restart from zero in every layer, as on our side
            e = torch.where(g.edge_mask[:, None] > 0, e, 0.0)
        return self.norm2(h, g.node_mask), e


class PostMP(nn.Module):
    """GraphGym's MLP head: (layers - 1) x [Linear -> ReLU -> L2 normalize], then a Linear."""

    def __init__(self, dim: int, out: int, layers: int):
        super().__init__()
        sizes = [dim] * layers + [out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            h = F.normalize(F.relu(layer(h)), p=2.0, dim=-1)
        return self.layers[-1](h)


class GraphMambaNet(nn.Module):
    """encoder -> layers.{i} (GPSLayer) -> mean pooling (graph tasks) -> post_mp: (n, out) or (G, out) logits."""

    def __init__(self, cfg: GraphMambaConfig, mamba_cls: type):
        super().__init__()
        self.cfg = cfg
        self.encoder = FeatureEncoder(cfg)
        self.layers = nn.ModuleList(
            GPSLayer(
                cfg.dim_hidden,
                dropout=cfg.dropout,
                d_state=cfg.d_state,
                d_conv=cfg.d_conv,
                expand=cfg.expand,
                mamba_cls=mamba_cls,
            )
            for _ in range(cfg.n_layers)
        )
        self.post_mp = PostMP(cfg.dim_hidden, cfg.num_outputs, cfg.head_layers)

    def random_inputs(self, g: GraphInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(noise (n_layers, orderings, n), signs (K,) or None): the inputs' own, else drawn as the reference
        draws them (one ordering per layer in training, eval_orderings in eval; a fair sign per frequency)."""
        noise, signs = g.order_noise, None
        if noise is None:
            orderings = 1 if self.training else self.cfg.eval_orderings
            noise = torch.rand(self.cfg.n_layers, orderings, g.x.shape[0], device=g.x.device)
        if self.training and self.cfg.lap_pe_dim:
            signs = g.eig_signs
            if signs is None:
                flip = torch.rand(g.eigvecs.shape[1], device=g.x.device)
                signs = torch.where(flip >= 0.5, 1.0, -1.0)
        return noise, signs

    def forward(self, g: GraphInputs) -> torch.Tensor:
        noise, signs = self.random_inputs(g)
        h, e = self.encoder(g, signs)
        for layer, layer_noise in zip(self.layers, noise, strict=True):
            h, e = layer(h, e, g, layer_noise)
        if self.cfg.task_level == "graph" and g.padded:
            mask = g.node_mask[:, None]
            sums = scatter(h * mask, g.batch, 0, dim_size=g.num_graphs + 1, reduce="sum")[: g.num_graphs]
            counts = scatter(mask, g.batch, 0, dim_size=g.num_graphs + 1, reduce="sum")[: g.num_graphs]
            h = sums / counts.clamp(min=1.0)  # the mean over each graph's real nodes (0 for an empty slot)
        elif self.cfg.task_level == "graph":
            h = global_mean_pool(h, g.batch, size=g.num_graphs)
        return self.post_mp(h)
