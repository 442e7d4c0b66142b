"""Graph data: the Graph record's checks, the bucket ladder, packing (every key, padding invariants), Laplacian PE
against a direct dense computation, the generated sets, GraphDataset (determinism, accumulation, evaluation, how
few shapes an epoch needs) and PyG datasets on disk (skipped without torch_geometric)."""

import os
import pickle

import numpy as np
import pytest

from jax_mamba.configs.schema import MODEL_CONFIGS, DataConfig, RunConfig, TrainConfig, validate
from jax_mamba.data import DataError, make_dataset
from jax_mamba.data.graphs import (
    GRAPH_CLASSES,
    Graph,
    GraphDataset,
    bucket_size,
    cluster_graphs,
    graph_class_graphs,
    laplacian_pe,
    laplacian_pe_many,
    pack,
    pack_sizes,
    pattern_graphs,
)
from jax_mamba.data.image_classification import training_indices


def random_graph(rng, n: int, *, categorical=False, edge_dim=0, label="node", targets=3) -> Graph:
    """n nodes, about 2n random directed edges (self loops and duplicates included), features and labels as asked."""
    edges = rng.integers(0, n, size=(2, int(rng.integers(0, 2 * n + 1))))
    x = rng.integers(0, 5, size=(n, 2)) if categorical else rng.normal(size=(n, 4))
    y = {
        "node": rng.integers(0, 3, size=n),
        "class": np.int64(rng.integers(0, 4)),
        "multilabel": rng.integers(0, 2, size=targets).astype(np.float32),
    }[label]
    attr = rng.normal(size=(edges.shape[1], edge_dim)) if edge_dim else None
    return Graph(x, edges, y, attr)


# The Graph record


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: Graph(np.zeros((0, 2)), np.zeros((2, 0), int), np.zeros(0, int)), r"Graph.x: .* n >= 1"),
        (lambda: Graph(np.zeros(3), np.zeros((2, 0), int), np.zeros(3, int)), r"Graph.x: expected an \(n, F\)"),
        (
            lambda: Graph(np.zeros((3, 1)), np.array([[0, 3], [1, 1]]), np.zeros(3, int)),
            r"node ids must be in \[0, 3\)",
        ),
        (
            lambda: Graph(np.zeros((3, 1)), np.zeros((3, 2), int), np.zeros(3, int)),
            r"Graph.edge_index: expected a \(2, e\)",
        ),
        (lambda: Graph(np.zeros((3, 1)), np.zeros((2, 1), int), np.zeros(2, int)), r"Graph.y: integer labels"),
        (lambda: Graph(np.zeros((3, 1)), np.zeros((2, 1), int), np.array([np.nan])), r"Graph.y: expected finite"),
        (lambda: Graph(np.full((3, 1), -1), np.zeros((2, 1), int), np.int64(0)), r"Graph.x: expected categorical ids"),
        (lambda: Graph(np.zeros((3, 1)), np.zeros((2, 2), int), np.int64(0), np.zeros((3, 1))), r"Graph.edge_attr"),
        (lambda: Graph(np.array([["a"]]), np.zeros((2, 0), int), np.int64(0)), r"Graph.x: expected float .* dtype"),
    ],
)
def test_graph_rejects_bad_input_naming_the_field(make, message):
    with pytest.raises(DataError, match=message):
        make()


def test_graph_converts_dtypes_and_knows_its_task_level(rng):
    g = Graph(rng.normal(size=(4, 3)), rng.integers(0, 4, size=(2, 5)), rng.integers(0, 2, size=4))
    assert g.x.dtype == np.float32 and g.edge_index.dtype == np.int32 and g.y.dtype == np.int32
    assert (g.num_nodes, g.num_edges, g.task_level) == (4, 5, "node")
    assert Graph(np.ones((1, 1), np.int64), np.zeros((2, 0)), np.float64(0.5)).y.shape == (1,)  # one float target
    assert Graph(np.ones((4, 1), np.int64), np.zeros((2, 0)), np.int64(2)).task_level == "graph"


# The bucket ladder


def test_bucket_ladder_bounds_padding_and_is_a_ladder(rng):
    for steps in (1, 2, 3, 4, 8):
        values = np.concatenate([np.arange(1, 300), rng.integers(300, 10**6, size=300)])
        buckets = np.array([bucket_size(int(v), steps) for v in values])
        assert (buckets >= values).all() and (buckets >= 8).all()
        assert (buckets <= np.maximum(8, np.ceil(values * (1 + 1 / steps)) + 1)).all()  # at most 1/steps padding
        assert all(bucket_size(int(b), steps) == b for b in buckets)  # ladder values map to themselves
        order = np.argsort(values)
        assert (np.diff(buckets[order]) >= 0).all()  # monotone
        octave = {bucket_size(v, steps) for v in range(1025, 2049)}
        assert len(octave) == steps and max(octave) == 2048
    assert [bucket_size(v, 4) for v in (8, 9, 11, 13, 15, 17, 100)] == [8, 10, 12, 14, 16, 20, 112]
    assert [bucket_size(v, 3) for v in (9, 12, 15, 17)] == [11, 14, 16, 22]  # rungs rounded up: ceil(8 * 4 / 3) = 11
    with pytest.raises(ValueError, match="steps"):
        bucket_size(10, 0)


# Packing


def test_pack_contract_for_node_tasks(rng):
    sizes = [1, *rng.integers(2, 40, size=int(rng.integers(2, 6))).tolist()]
    graphs = [random_graph(rng, n, categorical=True, edge_dim=3) for n in sizes]
    pe = [laplacian_pe(g.edge_index, g.num_nodes, 5) for g in graphs]
    batch_size = len(graphs) + 2  # two empty graph slots
    batch = pack(graphs, batch_size, 4, pe=pe)
    total, edges = sum(sizes), sum(g.num_edges for g in graphs)
    N, E, M = pack_sizes(graphs, 4)
    assert N > total and E >= max(edges, 1) and M >= max(sizes)
    expected = {
        "node_feat": ((N, 2), np.int32),
        "edge_feat": ((E, 3), np.float32),
        "senders": ((E,), np.int32),
        "receivers": ((E,), np.int32),
        "node_graph": ((N,), np.int32),
        "node_mask": ((N,), np.float32),
        "edge_mask": ((E,), np.float32),
        "slots": ((batch_size, M), np.int32),
        "graph_mask": ((batch_size,), np.float32),
        "eigvecs": ((N, 5), np.float32),
        "eigvals": ((N, 5), np.float32),
        "eig_mask": ((N, 5), np.float32),
        "node_labels": ((N,), np.int32),
    }
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == expected
    assert batch["node_mask"].sum() == total and batch["node_mask"][-1] == 0 and batch["edge_mask"].sum() == edges
    assert batch["graph_mask"].tolist() == [1.0] * len(graphs) + [0.0, 0.0]
    padding = np.arange(total, N)
    np.testing.assert_array_equal(batch["senders"][edges:], batch["receivers"][edges:])
    spread = total + np.arange(edges, E) % (N - total)  # self-loops on the padding rows in turn
    np.testing.assert_array_equal(batch["senders"][edges:], spread)
    assert (batch["node_graph"][total:] == batch_size).all()
    for key in ("node_feat", "eigvecs", "eigvals", "eig_mask", "node_labels"):
        assert not batch[key][total:].any(), key
    assert not batch["edge_feat"][edges:].any()
    offset, edge_at = 0, 0
    for b, (g, p) in enumerate(zip(graphs, pe, strict=True)):
        rows = slice(offset, offset + g.num_nodes)
        assert (batch["node_graph"][rows] == b).all()
        np.testing.assert_array_equal(batch["node_feat"][rows], g.x)
        np.testing.assert_array_equal(batch["node_labels"][rows], g.y)
        np.testing.assert_array_equal(batch["eigvecs"][rows], p.eigvecs)
        assert (batch["eigvals"][rows] == p.eigvals).all() and (batch["eig_mask"][rows] == p.mask).all()
        assert batch["slots"][b, : g.num_nodes].tolist() == list(range(offset, offset + g.num_nodes))
        assert set(batch["slots"][b, g.num_nodes :]) <= set(padding)
        span = slice(edge_at, edge_at + g.num_edges)
        np.testing.assert_array_equal(batch["senders"][span], g.edge_index[0] + offset)
        np.testing.assert_array_equal(batch["receivers"][span], g.edge_index[1] + offset)
        np.testing.assert_array_equal(batch["edge_feat"][span], g.edge_attr)
        offset, edge_at = offset + g.num_nodes, edge_at + g.num_edges
    assert set(batch["slots"][len(graphs) :].ravel()) <= set(padding)


@pytest.mark.parametrize("label,shape,dtype", [("class", (6,), np.int32), ("multilabel", (6, 3), np.float32)])
def test_pack_graph_labels_and_edgeless_graphs(rng, label, shape, dtype):
    graphs = [
        Graph(rng.normal(size=(n, 2)), np.zeros((2, 0), int), random_graph(rng, n, label=label).y) for n in (3, 1)
    ]
    batch = pack(graphs, 6, 4, min_sizes=(40, 20, 16))
    assert batch["graph_labels"].shape == shape and batch["graph_labels"].dtype == dtype
    np.testing.assert_array_equal(batch["graph_labels"][:2], np.stack([g.y for g in graphs]))
    assert not batch["graph_labels"][2:].any() and "node_labels" not in batch and "edge_feat" not in batch
    assert batch["node_feat"].shape[0] == 40 and batch["senders"].shape == (20,) and batch["slots"].shape == (6, 16)
    assert not batch["edge_mask"].any() and "eigvecs" not in batch


def test_pack_keeps_a_padding_node_when_the_nodes_fill_a_bucket(rng):
    sizes = [int(rng.integers(1, 16))]
    sizes.append(16 - sizes[0])  # 16 real nodes: a ladder value, so the padding node needs the next rung
    graphs = [random_graph(rng, n) for n in sizes]
    batch = pack(graphs, 2, 4)
    assert batch["node_feat"].shape[0] == 20 and batch["node_mask"][-1] == 0 and batch["node_graph"][-1] == 2
    padding_slots = batch["slots"][batch["slots"] >= 16]
    assert set(padding_slots) <= {16, 17, 18, 19}  # slots past a graph read padding rows (if the width has any)


def test_pack_rejects_mixed_graphs_and_too_many(rng):
    dense, categorical = random_graph(rng, 5), random_graph(rng, 5, categorical=True)
    with pytest.raises(DataError, match="graph 1 of a batch: node features"):
        pack([dense, categorical], 4, 4)
    with pytest.raises(DataError, match="edge features"):
        pack([dense, random_graph(rng, 5, edge_dim=2)], 4, 4)
    with pytest.raises(ValueError, match="1 to batch_size=1"):
        pack([dense, dense], 1, 4)


# Laplacian positional encodings


def dense_reference(edges: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of D - A built edge by edge from the undirected simple graph (a set of unordered pairs)."""
    pairs = {(min(a, b), max(a, b)) for a, b in edges.T.tolist() if a != b}
    laplacian = np.zeros((n, n))
    for a, b in pairs:
        laplacian[a, b] = laplacian[b, a] = -1.0
        laplacian[a, a] += 1.0
        laplacian[b, b] += 1.0
    return np.linalg.eigh(laplacian)


@pytest.mark.parametrize("n", [1, 2, 5, 9, 30, 64])
def test_lap_pe_matches_a_dense_decomposition(rng, n):
    k = 10
    edges = rng.integers(0, n, size=(2, int(rng.integers(0, 3 * n + 1))))  # duplicates, self loops, one direction
    pe = laplacian_pe(edges, n, k)
    values, vectors = dense_reference(edges, n)
    kept = min(n, k)
    assert (
        pe.eigvecs.shape == (n, k)
        and pe.eigvals.shape == (k,)
        and pe.mask.tolist() == [1.0] * kept + [0.0] * (k - kept)
    )
    assert not pe.eigvecs[:, kept:].any() and not pe.eigvals[kept:].any() and np.isfinite(pe.eigvecs).all()
    np.testing.assert_allclose(pe.eigvals[:kept], np.clip(values[:kept], 0, None), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(pe.eigvecs[:, :kept], axis=0), 1.0, rtol=1e-5)
    gaps = np.diff(np.concatenate([[-np.inf], values, [np.inf]]))
    for j in range(kept):
        if min(gaps[j], gaps[j + 1]) > 1e-4:  # a simple eigenvalue: its eigenvector is unique up to sign
            assert abs(pe.eigvecs[:, j] @ vectors[:, j]) == pytest.approx(1.0, abs=1e-4)
    if n == 1:
        assert pe.eigvecs[0].tolist() == [1.0] + [0.0] * (k - 1)


def test_lap_pe_workers_give_the_same_encodings(rng):
    graphs = [(rng.integers(0, n, size=(2, 2 * n)), n) for n in rng.integers(1, 30, size=40).tolist()]
    alone, pooled = laplacian_pe_many(graphs, 6, workers=0), laplacian_pe_many(graphs, 6, workers=2, chunk=7)
    for a, b in zip(alone, pooled, strict=True):
        np.testing.assert_allclose(a.eigvals, b.eigvals, atol=1e-6)
        np.testing.assert_allclose(np.abs(a.eigvecs), np.abs(b.eigvecs), atol=1e-5)
        assert (a.mask == b.mask).all()


# Generated sets


def assert_undirected_simple(g: Graph) -> None:
    senders, receivers = g.edge_index
    assert (senders != receivers).all()
    pairs = set(zip(senders.tolist(), receivers.tolist(), strict=True))
    assert len(pairs) == g.num_edges and pairs == {(b, a) for a, b in pairs}


def test_cluster_graphs_follow_the_recipe(rng):
    seed = int(rng.integers(10**6))
    graphs = cluster_graphs(12, seed)
    again = cluster_graphs(12, seed)
    assert all(
        np.array_equal(a.edge_index, b.edge_index) and np.array_equal(a.x, b.x)
        for a, b in zip(graphs, again, strict=True)
    )
    assert not np.array_equal(cluster_graphs(1, seed + 1)[0].edge_index, graphs[0].edge_index)
    for g in graphs:
        assert 30 <= g.num_nodes <= 210 and g.x.shape[1] == 7 and g.y.dtype == np.int32
        assert sorted(set(g.y.tolist())) == list(range(6)) and (np.bincount(g.y) >= 5).all()
        assert (g.x.sum(axis=1) == 1).all()
        shown = g.x.argmax(axis=1)
        assert sorted(shown[shown > 0].tolist()) == list(range(1, 7))
        assert (g.y[shown > 0] == shown[shown > 0] - 1).all()  # the shown value is the node's community + 1
        assert_undirected_simple(g)
        same = g.y[g.edge_index[0]] == g.y[g.edge_index[1]]
        assert same.mean() > 0.25  # denser inside communities (p 0.55 vs q 0.25)


def test_pattern_graphs_plant_the_pattern(rng):
    seed = int(rng.integers(10**6))
    graphs = pattern_graphs(8, seed)
    for g in graphs:
        assert 45 <= g.num_nodes <= 195 and g.x.shape[1] == 3 and (g.x.sum(axis=1) == 1).all()
        assert g.y.sum() == 20 and set(g.y.tolist()) == {0, 1}
        assert_undirected_simple(g)
    features = {tuple(np.sort(g.x[g.y == 1].argmax(axis=1))) for g in graphs}
    assert len(features) == 1  # one planted pattern: the same features in every graph
    assert pattern_graphs(1, seed)[0].y.tolist() == graphs[0].y.tolist()


def test_graph_class_graphs_are_balanced_and_structurally_distinct(rng):
    seed = int(rng.integers(10**6))
    graphs = graph_class_graphs(100, seed)
    labels = np.array([int(g.y) for g in graphs])
    assert np.bincount(labels).tolist() == [20] * len(GRAPH_CLASSES)
    spread = {c: [] for c in range(len(GRAPH_CLASSES))}
    for g, label in zip(graphs, labels, strict=True):
        assert 24 <= g.num_nodes <= 64 and g.x.dtype == np.int32 and g.x.max() < 3
        assert_undirected_simple(g)
        same = (g.x[g.edge_index[0], 0] == g.x[g.edge_index[1], 0]).astype(np.int32)
        np.testing.assert_array_equal(g.edge_attr[:, 0], same)
        degree = np.bincount(g.edge_index[0], minlength=g.num_nodes)
        assert 3.5 < degree.mean() < 8.5
        spread[label].append(degree.std())
    erdos, preferential = GRAPH_CLASSES.index("erdos_renyi"), GRAPH_CLASSES.index("preferential_attachment")
    assert np.mean(spread[preferential]) > 1.3 * np.mean(spread[erdos])
    assert [int(g.y) for g in graph_class_graphs(100, seed)] == labels.tolist()


# GraphDataset


def test_dataset_batches_are_deterministic_and_share_shapes_under_accumulation(rng):
    graphs = [random_graph(rng, int(n), categorical=True, label="class") for n in rng.integers(1, 60, size=50)]
    settings = dict(
        batch_size=4, seed=int(rng.integers(1000)), eval_batches=2, lap_pe_freqs=3, bucket_steps=4, source="t"
    )
    dataset = GraphDataset(graphs[:40], graphs[40:], **settings)
    batch = dataset.train_batch(7, 3)
    again = GraphDataset(graphs[:40], graphs[40:], **settings).train_batch(7, 3)
    assert batch.keys() == again.keys() and all(np.array_equal(batch[k], again[k]) for k in batch)
    assert batch["graph_labels"].shape == (3, 4) and batch["slots"].shape[:2] == (3, 4)
    assert batch["eigvecs"].shape[0] == 3 and batch["node_feat"].shape[:2] == batch["node_mask"].shape
    for m in range(3):  # every micro-batch is the pack of its own graphs at the common shapes
        index = training_indices(settings["seed"], 40, (7 * 3 + m) * 4, 4)
        N, E, M = batch["node_feat"].shape[1], batch["senders"].shape[1], batch["slots"].shape[2]
        pe = [laplacian_pe(graphs[i].edge_index, graphs[i].num_nodes, 3) for i in index]
        single = pack([graphs[i] for i in index], 4, 4, (N, E, M), pe=pe)
        assert all(np.array_equal(single[k], batch[k][m]) for k in single)
    assert not np.array_equal(dataset.train_batch(8, 3)["graph_labels"], batch["graph_labels"])
    evals = dataset.eval_batches()
    assert [int(e["graph_mask"].sum()) for e in evals] == [4, 4] and evals is dataset.eval_batches()
    assert len({tuple(v.shape for v in e.values()) for e in evals}) == 1  # one common evaluation shape
    assert dataset.task_level == "graph" and dataset.task_type == "multiclass" and dataset.metric == "accuracy"
    assert dataset.node_feature_kind == "categorical" and dataset.node_vocab == [
        int(max(g.x[:, c].max() for g in graphs)) + 1 for c in range(2)
    ]
    assert dataset.edge_feature_kind == "none" and dataset.max_graph_size == max(g.num_nodes for g in graphs)


def test_an_epoch_of_cluster_data_needs_few_shapes(rng):
    dataset = make_dataset(
        DataConfig(kind="cluster", num_graphs=300, lap_pe_freqs=0, val_fraction=0.1),
        TrainConfig(batch_size=32, seed=int(rng.integers(1000))),
    )
    shapes = set()
    for step in range(2 * len(dataset.train) // 32):
        batch = dataset.train_batch(step, 1)
        shapes.add((batch["node_feat"].shape, batch["senders"].shape, batch["slots"].shape))
    assert len(shapes) <= 6, shapes
    described = dataset.describe()
    assert described["train_graphs"] == 270 and described["task"] == "node multiclass" and dataset.num_outputs == 6
    assert dataset.node_feature_kind == "dense" and dataset.node_in_dim == 7 and dataset.lap_pe_freqs == 0
    assert "eigvecs" not in batch


def test_graph_configs_validate_the_data_fields():
    def run(**data) -> RunConfig:
        return RunConfig(family="graph_mamba", model=MODEL_CONFIGS["graph_mamba"](), data=DataConfig(**data))

    validate(run(kind="graph_classes"))
    for data, field in (
        ({"kind": "pyg"}, "data.path"),
        ({"kind": "cluster", "bucket_steps": 0}, "data.bucket_steps"),
        ({"kind": "cluster", "lap_pe_freqs": -1}, "data.lap_pe_freqs"),
        ({"kind": "cluster", "num_graphs": 1}, "data.num_graphs"),
        ({"kind": "shapes"}, "data.kind"),
    ):
        with pytest.raises(ValueError, match=field):
            validate(run(**data))


# PyG datasets on disk


@pytest.fixture
def pyg():
    torch = pytest.importorskip("torch")
    geometric = pytest.importorskip("torch_geometric.data")
    return torch, geometric


def pyg_graphs(torch, geometric, rng, count: int, node_labels=False) -> list:
    """PyG Data objects like peptides-func's: categorical x (n, 9), edge_attr (e, 3), y (1, 10) multilabel."""
    out = []
    for n in rng.integers(2, 25, size=count).tolist():
        edges = torch.from_numpy(rng.integers(0, n, size=(2, 2 * n)))
        y = (
            torch.from_numpy(rng.integers(0, 3, size=n))
            if node_labels
            else torch.from_numpy(rng.integers(0, 2, (1, 10))).float()
        )
        x = torch.from_numpy(rng.integers(0, 6, size=(n, 9)))
        out.append(
            geometric.Data(x=x, edge_index=edges, edge_attr=torch.from_numpy(rng.integers(0, 4, (2 * n, 3))), y=y)
        )
    return out


def test_pyg_lrgb_layout_loads_as_a_multilabel_dataset(pyg, tmp_path, rng):
    torch, geometric = pyg
    processed = tmp_path / "peptides-func" / "processed"
    processed.mkdir(parents=True)
    splits = {
        name: pyg_graphs(torch, geometric, rng, count) for name, count in (("train", 12), ("val", 5), ("test", 3))
    }
    for name, graphs in splits.items():
        geometric.InMemoryDataset.save(graphs, str(processed / f"{name}.pt"))
    torch.save(None, processed / "pre_transform.pt")  # PyG's bookkeeping files are ignored
    for path in (tmp_path, tmp_path / "peptides-func", processed):
        data = DataConfig(kind="pyg", path=str(path), lap_pe_freqs=4)
        dataset = make_dataset(data, TrainConfig(batch_size=4, eval_batches=1))
        assert len(dataset.train) == 12 and len(dataset.val) == 5
    assert (dataset.task_level, dataset.task_type, dataset.num_outputs, dataset.metric) == (
        "graph",
        "multilabel",
        10,
        "average_precision",
    )
    every = splits["train"] + splits["val"]
    assert dataset.node_feature_kind == "categorical" and dataset.node_in_dim == 9
    assert dataset.node_vocab == (torch.cat([d.x for d in every]).max(dim=0).values + 1).tolist()
    assert (
        dataset.edge_feature_kind == "categorical"
        and dataset.edge_vocab == (torch.cat([d.edge_attr for d in every]).max(dim=0).values + 1).tolist()
    )
    first = dataset.train[0]
    np.testing.assert_array_equal(first.x, splits["train"][0].x.numpy())
    np.testing.assert_array_equal(first.y, splits["train"][0].y.numpy()[0])
    batch = dataset.train_batch(0, 1)
    assert batch["graph_labels"].shape == (1, 4, 10) and batch["edge_feat"].dtype == np.int32


def test_pyg_single_file_is_split_by_permutation_or_by_a_split_file(pyg, tmp_path, rng):
    torch, geometric = pyg
    graphs = pyg_graphs(torch, geometric, rng, 20, node_labels=True)
    processed = tmp_path / "processed"
    processed.mkdir()
    data, slices = geometric.InMemoryDataset.collate(graphs)
    torch.save((data, slices), processed / "geometric_data_processed.pt")  # the older (data, slices) form
    config = DataConfig(kind="pyg", path=str(tmp_path), val_fraction=0.25, lap_pe_freqs=0)
    dataset = make_dataset(config, TrainConfig(batch_size=4))
    assert len(dataset.train) == 15 and len(dataset.val) == 5 and dataset.task_level == "node"
    assert dataset.node_feature_kind == "categorical" and dataset.num_outputs == 3
    again = make_dataset(config, TrainConfig(batch_size=4))
    assert [g.num_nodes for g in again.val] == [g.num_nodes for g in dataset.val]  # a fixed split
    with open(tmp_path / "splits_random.pickle", "wb") as f:
        pickle.dump({"train": np.arange(3, 20), "val": np.arange(3), "test": np.arange(0)}, f)
    split = make_dataset(config, TrainConfig(batch_size=4))
    assert [g.num_nodes for g in split.val] == [int(d.num_nodes) for d in graphs[:3]] and len(split.train) == 17
    assert "split by splits_random.pickle" in split.describe()["source"]


def test_pyg_bad_folders_and_files_name_the_problem(pyg, tmp_path, rng):
    torch, geometric = pyg

    def load(path):
        return make_dataset(DataConfig(kind="pyg", path=str(path)), TrainConfig(batch_size=2))

    with pytest.raises(DataError, match="does not exist"):
        load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no PyG data files"):
        load(tmp_path / "empty")
    (tmp_path / "noise").mkdir()
    (tmp_path / "noise" / "data.pt").write_bytes(os.urandom(int(rng.integers(100, 2000))))
    with pytest.raises(DataError, match=r"noise/data.pt: not a readable PyG InMemoryDataset file"):
        load(tmp_path / "noise")
    (tmp_path / "tensor").mkdir()
    torch.save(torch.zeros(3), tmp_path / "tensor" / "data.pt")
    with pytest.raises(DataError, match="not a readable PyG InMemoryDataset file"):
        load(tmp_path / "tensor")
    (tmp_path / "unlabelled").mkdir()
    unlabelled = [geometric.Data(x=torch.zeros(3, 1), edge_index=torch.zeros(2, 0, dtype=torch.long)) for _ in range(2)]
    geometric.InMemoryDataset.save(unlabelled, str(tmp_path / "unlabelled" / "data.pt"))
    with pytest.raises(DataError, match="graph 0 has no labels y"):
        load(tmp_path / "unlabelled")
    torch.save(torch.zeros(1), tmp_path / "unlabelled" / "more.pt")
    with pytest.raises(DataError, match=r"expected train.pt and val.pt, or a single data file"):
        load(tmp_path / "unlabelled")
