"""A user's PyG dataset saved on disk, read with torch_geometric (an optional dependency, imported only here).

Accepted layouts, for ``path`` a folder (its ``processed/`` subfolder, or a single dataset folder below it holding
``processed/``, is searched too) or a ``.pt`` file:

- split files, as ``torch_geometric.datasets.LRGBDataset`` writes them (e.g. peptides-func):
  ``processed/train.pt`` and ``processed/val.pt`` (``test.pt`` is left alone);
- one data file (any other name; PyG's ``pre_transform.pt``/``pre_filter.pt`` are ignored), split by a split file
  beside it or in the folder above (``split_idx.pt`` or ``split_dict.pt``, a ``torch.save``d dict; or a
  ``*split*.pickle``/``*.pkl``, as GraphGPS stores peptides' splits): keys ``train`` and ``val`` or ``valid``, index
  arrays; without one, ``val_fraction`` of the graphs, drawn by a fixed permutation, are validation.

Each data file holds ``(data, slices[, data class])`` as ``InMemoryDataset.save`` or ``torch.save(collate(...))``
writes it. Graphs become ``Graph`` records: integer x/edge_attr are categorical (int32), float ones dense (float32);
y with one entry per node (every graph, not all single-node) is a node task (integer classes), otherwise a graph
task: an integer y of one entry is a class, a float y (or an integer one of several 0/1 entries) the (T,) targets."""

import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jax_mamba.data.corpus import DataError
from jax_mamba.data.graphs.graph import Graph

IGNORED_FILES = {"pre_transform.pt", "pre_filter.pt"}
SPLIT_FILES = ("split_idx.pt", "split_dict.pt")
SPLIT_SEED = 20_240_601  # the permutation that splits a single data file: fixed, so the split never changes


@dataclass
class GraphSplits:
    train: list[Graph]
    val: list[Graph]
    source: str


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.pt") if p.name not in IGNORED_FILES and p.name not in SPLIT_FILES)


def _find_processed(root: Path) -> Path:
    """The folder holding the data files: root, root/processed, or the one root/*/processed."""
    for folder in (root / "processed", root):
        if folder.is_dir() and _data_files(folder):
            return folder
    below = [
        d / "processed" for d in sorted(root.iterdir()) if (d / "processed").is_dir() and _data_files(d / "processed")
    ]
    if len(below) == 1:
        return below[0]
    found = f"; several dataset folders below it: {[str(d.parent.name) for d in below]}" if below else ""
    raise DataError(
        f"data.path {str(root)!r} holds no PyG data files: expected .pt files (InMemoryDataset's processed/ folder, "
        f"e.g. processed/train.pt and processed/val.pt) in it, in its processed/ subfolder or in one <name>/processed/"
        f"{found}"
    )


def _torch_geometric():
    try:
        import torch
        from torch_geometric.data import InMemoryDataset
    except ImportError as error:
        raise DataError(
            f"data.kind 'pyg' reads PyG datasets with torch_geometric, which is not importable ({error}); install "
            "it (pip install torch-geometric) or use a generated set (data.kind cluster, pattern or graph_classes)"
        ) from error
    return torch, InMemoryDataset


def _read_file(path: Path) -> list:
    """The Data objects of one InMemoryDataset file."""
    _, in_memory = _torch_geometric()

    class Stored(in_memory):
        """A dataset with nothing to download or process: only ``load``."""

    stored = Stored()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Weights only load failed")
            stored.load(str(path))
        return [stored.get(i) for i in range(stored.len())]
    except Exception as error:  # anything torch or PyG raises on a file that is not theirs
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        raise DataError(
            f"{path}: not a readable PyG InMemoryDataset file ({type(error).__name__}: {reason}); expected "
            "(data, slices) as InMemoryDataset.save or torch.save(InMemoryDataset.collate(graphs)) writes it"
        ) from error


def _numpy(value, what: str, path: Path, index: int) -> np.ndarray:
    if value is None:
        raise DataError(f"{path}: graph {index} has no {what}; expected every graph to have x, edge_index and y")
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def _node_level(records: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    """True when every y has one entry per node (and not only because every graph has one node)."""
    per_node = all(y.ndim >= 1 and y.shape[0] == len(x) and y.size == len(x) for x, y in records)
    return per_node and any(len(x) > 1 for x, _ in records)


def _graph_labels(y: np.ndarray) -> np.ndarray:
    flat = y.reshape(-1)
    if np.issubdtype(y.dtype, np.integer) or y.dtype == np.bool_:
        if flat.size == 1:
            return flat[0].astype(np.int32)
        return flat.astype(np.float32)  # several integer entries: multilabel targets (Graph checks nothing else)
    return flat.astype(np.float32)


def _to_graphs(datas: list, path: Path) -> list[Graph]:
    records = []
    for i, data in enumerate(datas):
        x = _numpy(getattr(data, "x", None), "node features x", path, i)
        edges = _numpy(getattr(data, "edge_index", None), "edge_index", path, i)
        y = _numpy(getattr(data, "y", None), "labels y", path, i)
        attr = getattr(data, "edge_attr", None)
        attr = None if attr is None else _numpy(attr, "edge_attr", path, i)
        x = x[:, None] if x.ndim == 1 else x
        attr = attr[:, None] if attr is not None and attr.ndim == 1 else attr
        records.append((x, y, edges, attr))
    node_level = _node_level([(x, y) for x, y, _, _ in records])
    graphs = []
    for i, (x, y, edges, attr) in enumerate(records):
        if node_level and not np.issubdtype(y.dtype, np.integer):
            raise DataError(f"{path}: graph {i} has a float label per node; node tasks need integer classes")
        labels = y.reshape(-1) if node_level else _graph_labels(y)
        try:
            graphs.append(Graph(x, edges, labels, attr))
        except DataError as error:
            raise DataError(f"{path}: graph {i}: {error}") from error
    return graphs


def _split_index(folder: Path, count: int) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(train, val, file name) from a split file in ``folder`` or its parent, or None."""
    torch, _ = _torch_geometric()
    for place in (folder, folder.parent):
        candidates = [place / name for name in SPLIT_FILES if (place / name).is_file()]
        candidates += sorted(p for p in place.glob("*split*") if p.suffix in (".pickle", ".pkl"))
        if not candidates:
            continue
        path = candidates[0]
        try:
            if path.suffix == ".pt":
                splits = torch.load(path, weights_only=True)
            else:
                with open(path, "rb") as f:
                    splits = pickle.load(f)
            val_key = "val" if "val" in splits else "valid"
            train = np.asarray(splits["train"], np.int64).reshape(-1)
            val = np.asarray(splits[val_key], np.int64).reshape(-1)
        except Exception as error:
            raise DataError(
                f"{path}: unreadable split file ({type(error).__name__}: {error}); expected a dict with keys 'train' "
                "and 'val' (or 'valid') of graph index arrays"
            ) from error
        for name, index in (("train", train), ("val", val)):
            if index.size == 0 or index.min() < 0 or index.max() >= count:
                raise DataError(
                    f"{path}: split {name!r} must list graph indices in [0, {count}), got {index.size} entries"
                )
        return train, val, path.name
    return None


def load_pyg_folder(path: str, val_fraction: float) -> GraphSplits:
    """The training and validation graphs of the PyG dataset at ``path`` (layouts: the module docstring)."""
    root = Path(path).expanduser()
    if not root.exists():
        raise DataError(f"data.path {path!r} does not exist; expected a PyG dataset folder or .pt file")
    if root.is_file():
        if root.suffix != ".pt":
            raise DataError(
                f"data.path {path!r} is a file but not a .pt file; expected a PyG dataset folder or .pt file"
            )
        folder, files = root.parent, [root]
    else:
        folder = _find_processed(root)
        files = _data_files(folder)
    names = {f.name for f in files}
    if {"train.pt", "val.pt"} <= names:
        train = _to_graphs(_read_file(folder / "train.pt"), folder / "train.pt")
        val = _to_graphs(_read_file(folder / "val.pt"), folder / "val.pt")
        return GraphSplits(train, val, f"pyg: {folder} (train.pt, val.pt)")
    if len(files) != 1:
        raise DataError(f"{folder}: expected train.pt and val.pt, or a single data file, found {sorted(names)}")
    graphs = _to_graphs(_read_file(files[0]), files[0])
    split = _split_index(files[0].parent, len(graphs))
    if split is not None:
        train_index, val_index, split_name = split
        source = f"pyg: {files[0]} split by {split_name}"
    else:
        if len(graphs) < 2:
            raise DataError(f"{files[0]}: {len(graphs)} graph, too few to split into training and validation")
        order = np.random.default_rng(SPLIT_SEED).permutation(len(graphs))
        cut = min(len(graphs) - 1, max(1, round(len(graphs) * val_fraction)))
        val_index, train_index = np.sort(order[:cut]), np.sort(order[cut:])
        source = f"pyg: {files[0]}, {cut} of {len(graphs)} graphs for validation"
    return GraphSplits([graphs[i] for i in train_index], [graphs[i] for i in val_index], source)
