"""Build the dataset a run's config asks for."""

from jax_mamba.configs.schema import DataConfig, TrainConfig
from jax_mamba.data.batches import Dataset
from jax_mamba.data.corpus import DataError, stdlib_corpus, text_corpus
from jax_mamba.data.graphs.dataset import GraphDataset
from jax_mamba.data.graphs.graph import Graph
from jax_mamba.data.graphs.molecules import peptide_like_graphs
from jax_mamba.data.graphs.pyg_folder import load_pyg_folder
from jax_mamba.data.graphs.sbm import cluster_graphs, graph_class_graphs, pattern_graphs
from jax_mamba.data.image_classification import ArrayImageDataset, FolderImageDataset
from jax_mamba.data.image_folder import scan_image_folder
from jax_mamba.data.language_modeling import ByteLMDataset, TokenLMDataset
from jax_mamba.data.shapes import CLASSES, render_shapes
from jax_mamba.data.synthetic import InductionHeads, SelectiveCopying
from jax_mamba.data.token_files import load_token_files, tokenize_corpus

__all__ = ["DataError", "make_dataset"]

GRAPH_CONTENT_SEED = 20_240_517  # generated graph sets are fixed; the training seed only changes the batch order
GRAPH_GENERATORS = {
    "cluster": cluster_graphs,
    "pattern": pattern_graphs,
    "graph_classes": graph_class_graphs,
    "synthetic_peptides": peptide_like_graphs,
}


def _shapes(data: DataConfig, train: TrainConfig) -> ArrayImageDataset:
    images, labels = render_shapes(data.num_images, data.image_size)
    cut = max(1, min(data.num_images - 1, round(data.num_images * (1 - data.val_fraction))))
    return ArrayImageDataset(
        (images[:cut], labels[:cut]),
        (images[cut:], labels[cut:]),
        list(CLASSES),
        batch_size=train.batch_size,
        seed=train.seed,
        eval_batches=train.eval_batches,
        hflip=data.hflip,
        source=f"shapes: {data.num_images} generated {data.image_size}px images",
    )


def _graphs(data: DataConfig, train: TrainConfig) -> GraphDataset:
    """A generated graph set (the last val_fraction of it for validation) or a PyG dataset from data.path."""
    if data.kind == "pyg":
        if not data.path:
            raise DataError("data.kind 'pyg' needs data.path (a PyG dataset folder or .pt file); pass --data PATH")
        splits = load_pyg_folder(data.path, data.val_fraction)
        graphs_train, graphs_val, source = splits.train, splits.val, splits.source
    else:
        graphs: list[Graph] = GRAPH_GENERATORS[data.kind](data.num_graphs, GRAPH_CONTENT_SEED)
        cut = max(1, min(data.num_graphs - 1, round(data.num_graphs * (1 - data.val_fraction))))
        graphs_train, graphs_val = graphs[:cut], graphs[cut:]
        source = f"{data.kind}: {data.num_graphs} generated graphs"
    return GraphDataset(
        graphs_train,
        graphs_val,
        batch_size=train.batch_size,
        seed=train.seed,
        eval_batches=train.eval_batches,
        lap_pe_freqs=data.lap_pe_freqs,
        bucket_steps=data.bucket_steps,
        source=source,
    )


def make_dataset(data: DataConfig, train: TrainConfig) -> Dataset:
    common = dict(batch_size=train.batch_size, seq_len=train.seq_len, seed=train.seed, eval_batches=train.eval_batches)
    if data.kind in ("stdlib", "text"):
        if data.kind == "text" and not data.path:
            raise DataError("data.kind 'text' needs data.path (a text file or folder); pass --data PATH")
        corpus = (
            stdlib_corpus(data.val_fraction) if data.kind == "stdlib" else text_corpus(data.path, data.val_fraction)
        )
        if data.tokenizer:
            return TokenLMDataset(tokenize_corpus(corpus, data.tokenizer), **common)
        return ByteLMDataset(corpus, **common)
    if data.kind == "tokens":
        return TokenLMDataset(load_token_files(data.path, data.val_fraction, data.token_dtype), **common)
    if data.kind == "selective_copying":
        return SelectiveCopying(num_symbols=data.num_symbols, num_tokens_to_copy=data.num_tokens_to_copy, **common)
    if data.kind == "induction_heads":
        return InductionHeads(num_symbols=data.num_symbols, **common)
    if data.kind == "shapes":
        return _shapes(data, train)
    if data.kind == "image_folder":
        if not data.path:
            raise DataError("data.kind 'image_folder' needs data.path (a folder of class subfolders); pass --data PATH")
        return FolderImageDataset(
            scan_image_folder(data.path, data.val_fraction),
            batch_size=train.batch_size,
            seed=train.seed,
            eval_batches=train.eval_batches,
            image_size=data.image_size,
            crop_pct=data.crop_pct,
            min_scale=data.min_scale,
            hflip=data.hflip,
            num_workers=data.num_workers,
            worker_type=data.worker_type,
            prefetch=data.prefetch,
            bad_images=data.bad_images,
        )
    if data.kind in (*GRAPH_GENERATORS, "pyg"):
        return _graphs(data, train)
    raise DataError(f"unknown data.kind {data.kind!r}")
