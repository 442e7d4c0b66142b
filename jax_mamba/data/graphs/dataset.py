"""Graph batches for the training loop: training graphs walked in epochs of permutations drawn from (seed, epoch),
packed into bucket-sized padded batches (``packing``), every batch a pure function of (seed, step).

What the model needs to know about the data is read off the graphs here and exposed as attributes (checked by the
task against the model config): task_level "node" | "graph"; task_type "multiclass" | "multilabel" |
"regression"; num_outputs (classes, or targets T); node_feature_kind "dense" | "categorical", node_in_dim (F),
node_vocab (per-column max id + 1 over all graphs, categorical only); edge_feature_kind "none" | "dense" |
"categorical", edge_in_dim, edge_vocab; max_graph_size; lap_pe_freqs (K, 0 for none)."""

from collections.abc import Sequence

import numpy as np

from jax_mamba.data.batches import Batch
from jax_mamba.data.corpus import DataError
from jax_mamba.data.graphs.graph import Graph
from jax_mamba.data.graphs.lap_pe import LapPE, laplacian_pe_many
from jax_mamba.data.graphs.packing import pack, pack_sizes
from jax_mamba.data.graphs.shape_plan import PLAN_BATCHES_MAX, batch_needs, plan_shapes, shape_for
from jax_mamba.data.image_classification import training_indices

METRICS = {"multiclass": "accuracy", "multilabel": "average_precision", "regression": "mae"}


def _feature_kind(arrays: list[np.ndarray | None], what: str) -> tuple[str, int, list[int]]:
    """(kind, width, vocab) of one feature across all graphs; a mix of forms is a DataError."""
    present = [a for a in arrays if a is not None]
    if not present:
        return "none", 0, []
    if len(present) != len(arrays):
        raise DataError(f"{what}: some graphs have them and some do not; expected all or none")
    forms = {(a.dtype.name, a.shape[1]) for a in present}
    if len(forms) != 1:
        raise DataError(f"{what}: expected one dtype and width across graphs, found {sorted(forms)}")
    dtype, width = forms.pop()
    if dtype == "float32":
        return "dense", width, []
    maxima = np.max([a.max(axis=0) if len(a) else np.zeros(width, np.int32) for a in present], axis=0)
    return "categorical", width, [int(m) + 1 for m in maxima]


def _task(graphs: list[Graph]) -> tuple[str, str, int]:
    """(task_level, task_type, num_outputs) from the labels of all graphs."""
    levels = {g.task_level for g in graphs}
    if len(levels) != 1:
        raise DataError("labels: some graphs have a label per node and some per graph; expected one kind")
    level = levels.pop()
    forms = {(g.y.dtype.name, g.y.shape if level == "graph" else ()) for g in graphs}
    if len(forms) != 1:
        raise DataError(f"labels: expected one dtype and shape across graphs, found {sorted(forms, key=str)}")
    dtype, shape = forms.pop()
    if dtype == "int32":
        classes = max(int(g.y.max()) for g in graphs) + 1
        return level, "multiclass", max(classes, 2)
    binary = all(np.isin(g.y, (0.0, 1.0)).all() for g in graphs)
    return level, "multilabel" if binary else "regression", shape[0]


class GraphDataset:
    """Training and validation graphs in memory, packed on demand (training) or once (evaluation).

    Training batches have leading axis ``accum`` with every micro-batch padded to the same (N, E, M): the smallest
    shape of the run's plan (``shape_plan``, two or three shapes) that holds them all. Evaluation batches are the
    first ``eval_batches * batch_size`` validation graphs in order, all padded to one common shape (one compilation
    for evaluation), packed once and reused."""

    def __init__(
        self,
        train: Sequence[Graph],
        val: Sequence[Graph],
        *,
        batch_size: int,
        seed: int,
        eval_batches: int,
        lap_pe_freqs: int,
        bucket_steps: int,
        source: str,
    ):
        if not train or not val:
            raise DataError(f"{source}: expected training and validation graphs, got {len(train)} and {len(val)}")
        if lap_pe_freqs < 0 or bucket_steps < 1:
            raise ValueError(f"lap_pe_freqs >= 0 and bucket_steps >= 1 expected, got {lap_pe_freqs}, {bucket_steps}")
        self.train, self.val = list(train), list(val)
        self.batch_size, self.seed, self.source = batch_size, seed, source
        self.bucket_steps, self.lap_pe_freqs = bucket_steps, lap_pe_freqs
        every = self.train + self.val
        self.task_level, self.task_type, self.num_outputs = _task(every)
        self.metric = METRICS[self.task_type]
        self.node_feature_kind, self.node_in_dim, self.node_vocab = _feature_kind([g.x for g in every], "node features")
        self.edge_feature_kind, self.edge_in_dim, self.edge_vocab = _feature_kind(
            [g.edge_attr for g in every], "edge features"
        )
        self.max_graph_size = max(g.num_nodes for g in every)
        self._train_pe = self._val_pe = None
        if lap_pe_freqs:
            pe = laplacian_pe_many([(g.edge_index, g.num_nodes) for g in every], lap_pe_freqs)
            self._train_pe, self._val_pe = pe[: len(self.train)], pe[len(self.train) :]
        self._eval = self._pack_eval(eval_batches)
        self.shape_plan = self._plan()

    def _indices(self, micro_batch: int):
        return training_indices(self.seed, len(self.train), micro_batch * self.batch_size, self.batch_size)

    def _plan(self):
        """Planned training shapes from the first epoch's micro-batches (see ``shape_plan``)."""
        count = min(PLAN_BATCHES_MAX, max(1, len(self.train) // self.batch_size))
        needs = np.array([batch_needs(self.train, self._indices(m)) for m in range(count)])
        return plan_shapes(needs, self.bucket_steps)

    @staticmethod
    def _select(
        index: np.ndarray, graphs: list[Graph], pe: list[LapPE] | None
    ) -> tuple[list[Graph], list[LapPE] | None]:
        return [graphs[i] for i in index], None if pe is None else [pe[i] for i in index]

    def _pack_eval(self, batches: int) -> list[Batch]:
        used = min(len(self.val), batches * self.batch_size)
        chunks = [np.arange(i, min(i + self.batch_size, used)) for i in range(0, used, self.batch_size)]
        selected = [self._select(c, self.val, self._val_pe) for c in chunks]
        common = np.max([pack_sizes(g, self.bucket_steps) for g, _ in selected], axis=0)
        return [pack(g, self.batch_size, self.bucket_steps, tuple(common), pe=p) for g, p in selected]

    def train_batch(self, step: int, accum: int) -> Batch:
        """Micro-batch m of step s holds the training graphs at positions [(s * accum + m) * B, ... + B) of the
        epoch-after-epoch order; arrays gain a leading (accum,) axis."""
        indices = [self._indices(step * accum + m) for m in range(accum)]
        shape = shape_for([batch_needs(self.train, i) for i in indices], self.shape_plan, self.bucket_steps)
        selected = [self._select(i, self.train, self._train_pe) for i in indices]
        packed = [pack(g, self.batch_size, self.bucket_steps, shape, pe=p) for g, p in selected]
        return {key: np.stack([b[key] for b in packed]) for key in packed[0]}

    def eval_batches(self) -> list[Batch]:
        return self._eval

    def describe(self) -> dict:
        return {
            "kind": "graphs",
            "source": self.source,
            "task": f"{self.task_level} {self.task_type}",
            "outputs": self.num_outputs,
            "train_graphs": len(self.train),
            "val_graphs": len(self.val),
            "max_graph_size": self.max_graph_size,
            "mean_graph_size": round(float(np.mean([g.num_nodes for g in self.train + self.val])), 1),
            "node_features": f"{self.node_feature_kind} {self.node_in_dim}",
            "edge_features": f"{self.edge_feature_kind} {self.edge_in_dim}",
            "lap_pe_freqs": self.lap_pe_freqs,
            "bucket_steps": self.bucket_steps,
        }
