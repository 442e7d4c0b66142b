"""One graph on the host, in PyG's conventions, checked once when it is made so that packing can trust it."""

from dataclasses import dataclass

import numpy as np

from jax_mamba.data.corpus import DataError

INT32_MAX = np.iinfo(np.int32).max


def _as_features(name: str, value, rows: int, per: str) -> np.ndarray:
    """(rows, F) float32 for float input, int32 for integer (categorical, every id >= 0)."""
    array = np.asarray(value)
    if array.ndim != 2 or array.shape[0] != rows:
        raise DataError(f"Graph.{name}: expected a ({rows}, F) array, one row per {per}, got shape {array.shape}")
    if np.issubdtype(array.dtype, np.floating):
        if not np.isfinite(array).all():
            raise DataError(f"Graph.{name}: expected finite float features, found NaN or Inf")
        return array.astype(np.float32, copy=False)
    if np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_:
        if array.size and (array.min() < 0 or array.max() > INT32_MAX):
            raise DataError(f"Graph.{name}: expected categorical ids in [0, 2**31), got [{array.min()}, {array.max()}]")
        return array.astype(np.int32, copy=False)
    raise DataError(f"Graph.{name}: expected float (dense) or integer (categorical) features, got dtype {array.dtype}")


def _as_labels(value, num_nodes: int) -> np.ndarray:
    """Node classes (n,) int32, a graph class () int32, or graph targets (T,) float32."""
    y = np.asarray(value)
    if np.issubdtype(y.dtype, np.integer):
        if y.ndim not in (0, 1) or (y.ndim == 1 and len(y) != num_nodes):
            raise DataError(
                f"Graph.y: integer labels must be one class per node ({num_nodes},) or one per graph (), got shape "
                f"{y.shape} (multilabel or regression targets are float (T,))"
            )
        if y.size and (y.min() < 0 or y.max() > INT32_MAX):
            raise DataError(f"Graph.y: expected class ids >= 0, got [{y.min()}, {y.max()}]")
        return y.astype(np.int32, copy=False)
    if np.issubdtype(y.dtype, np.floating) or y.dtype == np.bool_:
        y = y.reshape(-1) if y.ndim == 0 else y
        if y.ndim != 1 or len(y) == 0:
            raise DataError(f"Graph.y: float targets must be a (T,) vector with T >= 1, got shape {y.shape}")
        if not np.isfinite(y).all():
            raise DataError("Graph.y: expected finite targets, found NaN or Inf")
        return y.astype(np.float32, copy=False)
    raise DataError(f"Graph.y: expected integer classes or float targets, got dtype {y.dtype}")


@dataclass(frozen=True, eq=False)
class Graph:
    """A graph with n >= 1 nodes and e >= 0 directed edges (an undirected graph lists both directions).

    x: (n, F) float32 dense node features, or int32 categorical ids (one column per feature, ids >= 0).
    edge_index: (2, e) int32; row 0 the senders (PyG's source j), row 1 the receivers (target i), in [0, n).
    y: node task: (n,) int32, a class per node; graph task: () int32 class, or (T,) float32 targets (multilabel 0/1
    or regression).
    edge_attr: (e, Fe) float32 dense or int32 categorical edge features, or None.

    Inputs of another integer or float dtype are converted; anything else raises a DataError naming the field."""

    x: np.ndarray
    edge_index: np.ndarray
    y: np.ndarray
    edge_attr: np.ndarray | None = None

    def __post_init__(self):
        x = np.asarray(self.x)
        if x.ndim != 2 or x.shape[0] < 1:
            raise DataError(f"Graph.x: expected an (n, F) array with n >= 1 nodes, got shape {x.shape}")
        n = x.shape[0]
        object.__setattr__(self, "x", _as_features("x", x, n, "node"))
        edges = np.asarray(self.edge_index)
        if edges.ndim != 2 or edges.shape[0] != 2 or not (np.issubdtype(edges.dtype, np.integer) or edges.size == 0):
            raise DataError(
                f"Graph.edge_index: expected a (2, e) integer array (senders, receivers), got shape {edges.shape} "
                f"dtype {edges.dtype}"
            )
        if edges.size and (edges.min() < 0 or edges.max() >= n):
            raise DataError(f"Graph.edge_index: node ids must be in [0, {n}), got [{edges.min()}, {edges.max()}]")
        object.__setattr__(self, "edge_index", edges.astype(np.int32, copy=False))
        object.__setattr__(self, "y", _as_labels(self.y, n))
        if self.edge_attr is not None:
            object.__setattr__(self, "edge_attr", _as_features("edge_attr", self.edge_attr, edges.shape[1], "edge"))

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    @property
    def task_level(self) -> str:
        """ "node" when y holds a class per node, else "graph"."""
        return "node" if self.y.ndim == 1 and self.y.dtype == np.int32 else "graph"
