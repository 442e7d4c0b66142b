"""Random padded graph batches that fit a ``GraphMambaConfig`` (its feature kinds, LapPE, task), for parity runs:
small random undirected graphs (isolated nodes and graphs smaller than the LapPE width included) packed by
``jax_mamba.data.graphs.pack`` into one more graph slot than graphs (an empty, masked slot)."""

import numpy as np

from jax_mamba.configs.schema import GraphMambaConfig
from jax_mamba.data.graphs import Graph, laplacian_pe, pack

BUCKET_STEPS = 4


def _features(rng: np.random.Generator, kind: str, rows: int, width: int, vocab: list[int]) -> np.ndarray | None:
    if kind == "categorical":
        return np.stack([rng.integers(0, v, rows) for v in vocab], axis=1).astype(np.int32)
    if kind == "dense":
        return rng.normal(size=(rows, width)).astype(np.float32)
    return None


def _labels(rng: np.random.Generator, m: GraphMambaConfig, num_nodes: int) -> np.ndarray:
    if m.task_type == "multiclass":
        return rng.integers(0, m.num_outputs, num_nodes if m.task_level == "node" else ()).astype(np.int32)
    if m.task_type == "multilabel":
        return rng.integers(0, 2, m.num_outputs).astype(np.float32)
    return rng.normal(size=m.num_outputs).astype(np.float32)


def random_graph(rng: np.random.Generator, m: GraphMambaConfig, num_nodes: int) -> Graph:
    """An undirected graph (both directions listed) with about 1.5 edges per node, features and labels per ``m``."""
    upper = np.array([(i, j) for i in range(num_nodes) for j in range(i + 1, num_nodes)], np.int32).reshape(-1, 2)
    count = min(len(upper), max(1, int(1.5 * num_nodes)))
    pairs = upper[rng.choice(len(upper), count, replace=False)]
    edge_index = np.concatenate([pairs.T, pairs.T[::-1]], axis=1)
    return Graph(
        x=_features(rng, m.node_feature_kind, num_nodes, m.node_in_dim, m.node_vocab),
        edge_index=edge_index,
        y=_labels(rng, m, num_nodes),
        edge_attr=_features(rng, m.edge_feature_kind, edge_index.shape[1], m.edge_in_dim, m.edge_vocab),
    )


def random_graph_batch(
    rng: np.random.Generator, m: GraphMambaConfig, graphs: int, max_nodes: int, lap_pe_freqs: int
) -> dict:
    """``graphs`` random graphs of 2..max_nodes nodes packed into graphs + 1 slots (padded batch keys: see
    ``jax_mamba.data.graphs.packing``), with LapPE of ``lap_pe_freqs`` frequencies when ``m.lap_pe_dim``."""
    if m.lap_pe_dim and lap_pe_freqs < 1:
        raise ValueError(f"model.lap_pe_dim={m.lap_pe_dim} needs lap_pe_freqs >= 1 (data.lap_pe_freqs)")
    sizes = rng.integers(2, max(max_nodes, 2) + 1, graphs)
    records = [random_graph(rng, m, int(n)) for n in sizes]
    pe = [laplacian_pe(g.edge_index, g.num_nodes, lap_pe_freqs) for g in records] if m.lap_pe_dim else None
    return pack(records, graphs + 1, BUCKET_STEPS, pe=pe)


def random_order_noise(rng: np.random.Generator, m: GraphMambaConfig, orderings: int, num_nodes: int) -> np.ndarray:
    """(n_layers, orderings, num_nodes) float32 uniform [0, 1): the degree tie-breaking noise."""
    return rng.random((m.n_layers, orderings, num_nodes), dtype=np.float32)


def random_signs(rng: np.random.Generator, count: int) -> np.ndarray:
    """(count,) float32 +-1."""
    return np.where(rng.random(count) < 0.5, -1.0, 1.0).astype(np.float32)
