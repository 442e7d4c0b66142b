"""Graph data: the ``Graph`` record, Laplacian positional encodings, packing into bucket-sized padded batches,
generated sets (CLUSTER-, PATTERN-like node tasks; a graph-classification set), PyG datasets on disk (with
torch_geometric installed) and ``GraphDataset``, the training loop's view of them."""

from jax_mamba.data.graphs.dataset import GraphDataset
from jax_mamba.data.graphs.graph import Graph
from jax_mamba.data.graphs.lap_pe import LapPE, laplacian_pe, laplacian_pe_many
from jax_mamba.data.graphs.packing import bucket_size, pack, pack_sizes
from jax_mamba.data.graphs.sbm import GRAPH_CLASSES, cluster_graphs, graph_class_graphs, pattern_graphs

__all__ = [
    "GRAPH_CLASSES",
    "Graph",
    "GraphDataset",
    "LapPE",
    "bucket_size",
    "cluster_graphs",
    "graph_class_graphs",
    "laplacian_pe",
    "laplacian_pe_many",
    "pack",
    "pack_sizes",
    "pattern_graphs",
]
