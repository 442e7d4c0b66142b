"""Pack a list of graphs into one padded batch of static "bucket" sizes, so that a jit-compiled step traces a
handful of shapes over a whole run instead of one per batch.

A batch of B graph slots (``batch_size``) holds N node rows, E edge rows and an M-wide per-graph slot table:

- ``node_feat`` (N, F) float32 or int32; ``edge_feat`` (E, Fe) float32 or int32, only when the graphs have edge
  features; ``senders``/``receivers`` (E,) int32, real edges first, then padding edges: self-loops on the padding
  rows in turn (spread, so that the scatter-adds of message passing and its gradients do not all hit one row);
- nodes graph after graph: graph b's ``size_b`` nodes are rows [offset_b, offset_b + size_b); ``node_graph`` (N,)
  int32 is b on them and B on padding rows; ``node_mask`` (N,) and ``edge_mask`` (E,) float32 are 1 on real rows;
- ``slots`` (B, M) int32: offset_b + m for m < size_b, else a padding row (the padding rows in turn);
- ``graph_mask`` (B,) float32: 1 for real graphs (fewer than B graphs leave empty, masked slots);
- with Laplacian PE (K frequencies): ``eigvecs``, ``eigvals`` (each node repeats its graph's) and ``eig_mask``,
  all (N, K) float32, 0 on padding rows and padded frequencies;
- labels: ``node_labels`` (N,) int32 for node tasks; for graph tasks ``graph_labels`` (B,) int32 (multiclass) or
  (B, T) float32 (multilabel, regression); 0 on padding.

N always exceeds the real node count (row N-1 is padding), E >= max(real edges, 1), M >= max(largest graph, 1);
each is rounded up to the ladder of ``bucket_size``."""

from collections.abc import Sequence

import numpy as np

from jax_mamba.data.corpus import DataError
from jax_mamba.data.graphs.graph import Graph
from jax_mamba.data.graphs.lap_pe import LapPE

MIN_BUCKET = 8


def bucket_size(value: int, steps: int) -> int:
    """The smallest ladder value >= ``value``: ceil(2**k * (1 + j / steps)) for j in [0, steps), at least 8.

    ``steps`` rungs per octave bound the padding to a factor (1 + 1 / steps), e.g. 25% for 4 steps."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected a positive integer (ladder rungs per octave), got {steps!r}")
    if value <= MIN_BUCKET:
        return MIN_BUCKET
    base = 1 << ((int(value) - 1).bit_length() - 1)  # base < value <= 2 * base
    for j in range(1, steps + 1):
        rung = -(-base * (steps + j) // steps)
        if rung >= value:
            return rung
    raise AssertionError("unreachable: the last rung is 2 * base")


def pack_sizes(graphs: Sequence[Graph], steps: int) -> tuple[int, int, int]:
    """The bucketed (N, E, M) that ``pack`` would use for ``graphs`` on its own."""
    nodes = sum(g.num_nodes for g in graphs)
    edges = sum(g.num_edges for g in graphs)
    widest = max((g.num_nodes for g in graphs), default=0)
    return bucket_size(nodes + 1, steps), bucket_size(max(edges, 1), steps), bucket_size(max(widest, 1), steps)


def _check_alike(graphs: Sequence[Graph], pe: Sequence[LapPE] | None) -> None:
    """All graphs must share feature widths and dtypes, edge features or none, and the label form."""
    first = graphs[0]
    for i, g in enumerate(graphs):
        if g.x.shape[1] != first.x.shape[1] or g.x.dtype != first.x.dtype:
            raise DataError(
                f"graph {i} of a batch: node features {g.x.dtype} width {g.x.shape[1]} differ from the first graph's "
                f"{first.x.dtype} width {first.x.shape[1]}"
            )
        if (g.edge_attr is None) != (first.edge_attr is None) or (
            g.edge_attr is not None
            and (g.edge_attr.shape[1:], g.edge_attr.dtype) != (first.edge_attr.shape[1:], first.edge_attr.dtype)
        ):
            raise DataError(
                f"graph {i} of a batch: edge features differ from the first graph's (presence, width or dtype)"
            )
        if (
            g.task_level != first.task_level
            or g.y.dtype != first.y.dtype
            or (g.task_level == "graph" and g.y.shape != first.y.shape)
        ):
            raise DataError(
                f"graph {i} of a batch: labels {g.y.dtype} {g.y.shape} differ in form from the first graph's"
            )
    if pe is not None:
        if len(pe) != len(graphs):
            raise ValueError(f"pe: expected one LapPE per graph ({len(graphs)}), got {len(pe)}")
        if any(p.eigvecs.shape != (g.num_nodes, pe[0].eigvals.shape[0]) for p, g in zip(pe, graphs, strict=True)):
            raise ValueError("pe: each LapPE must have eigvecs (n, K) for its graph's n nodes and one common K")


def padding_rows(count: int, real_nodes: int, num_nodes: int) -> np.ndarray:
    """(count,) int32: the padding node rows [real_nodes, num_nodes) in turn. Index tables point their padding
    entries here rather than at one row: on a GPU, thousands of scatter-adds into one row serialize on its atomics
    (measured at the CLUSTER config: two thirds of a training step)."""
    return (real_nodes + np.arange(count) % (num_nodes - real_nodes)).astype(np.int32)


def pack(
    graphs: Sequence[Graph],
    batch_size: int,
    steps: int,
    min_sizes: tuple[int, int, int] | None = None,
    *,
    pe: Sequence[LapPE] | None = None,
) -> dict[str, np.ndarray]:
    """One padded batch of 1..batch_size ``graphs`` (keys and shapes: the module docstring), with (N, E, M) the
    buckets of this batch or ``min_sizes`` where larger (so several micro-batches can share shapes). ``pe``: one
    LapPE per graph (all the same K), or None for no eigen keys."""
    if not 1 <= len(graphs) <= batch_size:
        raise ValueError(f"graphs: expected 1 to batch_size={batch_size} graphs, got {len(graphs)}")
    _check_alike(graphs, pe)
    num_nodes, num_edges, width = pack_sizes(graphs, steps)
    if min_sizes is not None:
        num_nodes, num_edges, width = (
            max(a, int(b)) for a, b in zip((num_nodes, num_edges, width), min_sizes, strict=True)
        )
    count = len(graphs)
    sizes = np.array([g.num_nodes for g in graphs], np.int64)
    edge_counts = np.array([g.num_edges for g in graphs], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    real_nodes, real_edges = int(sizes.sum()), int(edge_counts.sum())

    first = graphs[0]
    node_feat = np.zeros((num_nodes, first.x.shape[1]), first.x.dtype)
    node_feat[:real_nodes] = np.concatenate([g.x for g in graphs])
    edge_shift = np.repeat(offsets, edge_counts)
    senders = padding_rows(num_edges, real_nodes, num_nodes)
    receivers = senders.copy()
    if real_edges:
        all_edges = np.concatenate([g.edge_index for g in graphs], axis=1)
        senders[:real_edges] = all_edges[0] + edge_shift
        receivers[:real_edges] = all_edges[1] + edge_shift
    node_graph = np.full(num_nodes, batch_size, np.int32)
    node_graph[:real_nodes] = np.repeat(np.arange(count), sizes)
    node_mask = np.zeros(num_nodes, np.float32)
    node_mask[:real_nodes] = 1.0
    edge_mask = np.zeros(num_edges, np.float32)
    edge_mask[:real_edges] = 1.0
    all_sizes = np.zeros(batch_size, np.int64)
    all_sizes[:count] = sizes
    all_offsets = np.zeros(batch_size, np.int64)
    all_offsets[:count] = offsets
    column = np.arange(width)
    pad_slots = padding_rows(batch_size * width, real_nodes, num_nodes).reshape(batch_size, width)
    slots = np.where(column < all_sizes[:, None], all_offsets[:, None] + column, pad_slots).astype(np.int32)
    graph_mask = np.zeros(batch_size, np.float32)
    graph_mask[:count] = 1.0
    batch = {
        "node_feat": node_feat,
        "senders": senders,
        "receivers": receivers,
        "node_graph": node_graph,
        "node_mask": node_mask,
        "edge_mask": edge_mask,
        "slots": slots,
        "graph_mask": graph_mask,
    }
    if first.edge_attr is not None:
        edge_feat = np.zeros((num_edges, first.edge_attr.shape[1]), first.edge_attr.dtype)
        if real_edges:
            edge_feat[:real_edges] = np.concatenate([g.edge_attr for g in graphs])
        batch["edge_feat"] = edge_feat
    if pe is not None:
        freqs = pe[0].eigvals.shape[0]
        for key, rows in (
            ("eigvecs", [p.eigvecs for p in pe]),
            ("eigvals", [np.broadcast_to(p.eigvals, (n, freqs)) for p, n in zip(pe, sizes, strict=True)]),
            ("eig_mask", [np.broadcast_to(p.mask, (n, freqs)) for p, n in zip(pe, sizes, strict=True)]),
        ):
            array = np.zeros((num_nodes, freqs), np.float32)
            array[:real_nodes] = np.concatenate(rows)
            batch[key] = array
    if first.task_level == "node":
        labels = np.zeros(num_nodes, np.int32)
        labels[:real_nodes] = np.concatenate([g.y for g in graphs])
        batch["node_labels"] = labels
    else:
        labels = np.zeros((batch_size, *first.y.shape), first.y.dtype)
        labels[:count] = np.stack([g.y for g in graphs])
        batch["graph_labels"] = labels
    return batch
