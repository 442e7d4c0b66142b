"""Laplacian positional encodings (GraphGPS's LapPE precompute): the eigenpairs of the lowest frequencies of each
graph's combinatorial Laplacian, computed once on the host.

L = D - A of the undirected simple graph (edges symmetrized, duplicates dropped, self loops ignored), decomposed
densely (numpy ``eigh``); the ``max_freqs`` smallest eigenvalues in ascending order, clamped at 0, with their
eigenvectors scaled to unit L2 norm and signed so that their largest-magnitude entry is positive (the sign is
arbitrary; fixing it keeps the result, near-ties aside, the same across LAPACK builds and thread counts). Graphs
with fewer than ``max_freqs`` nodes have fewer frequencies: GraphGPS pads them with NaN, here they are zeros with a
mask, so that nothing downstream has to handle NaN.

Many graphs are decomposed by worker processes with single-threaded BLAS: a small ``eigh`` gains nothing from
OpenBLAS threads, and on a busy machine their spinning makes it ten times slower."""

import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

import numpy as np

from jax_mamba.data.corpus import DataError

CHUNK = 128  # graphs per task handed to a worker
PARALLEL_MIN_GRAPHS = 2 * CHUNK  # below this, starting worker processes costs more than it saves
MAX_WORKERS = 32
SINGLE_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
MAX_DENSE_NODES = 20_000  # a dense n x n decomposition beyond this is minutes and gigabytes per graph
NORM_EPS = 1e-12


class LapPE(NamedTuple):
    """One graph's encoding: eigvecs (n, K) float32, eigvals (K,) float32, mask (K,) float32 (1 = real frequency);
    eigvecs and eigvals are 0 where mask is 0."""

    eigvecs: np.ndarray
    eigvals: np.ndarray
    mask: np.ndarray


def laplacian(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """The dense (n, n) float64 Laplacian D - A of the undirected simple graph on ``edge_index`` (2, e)."""
    senders, receivers = np.asarray(edge_index)
    keep = senders != receivers
    adjacency = np.zeros((num_nodes, num_nodes))
    adjacency[senders[keep], receivers[keep]] = 1.0
    adjacency[receivers[keep], senders[keep]] = 1.0
    return np.diag(adjacency.sum(axis=1)) - adjacency


def laplacian_pe(edge_index: np.ndarray, num_nodes: int, max_freqs: int) -> LapPE:
    """The K = ``max_freqs`` lowest-frequency eigenpairs of one graph (``edge_index`` (2, e), node ids < num_nodes)."""
    if not isinstance(max_freqs, int) or max_freqs < 1:
        raise ValueError(f"max_freqs: expected a positive integer, got {max_freqs!r}")
    if num_nodes > MAX_DENSE_NODES:
        raise DataError(
            f"Laplacian PE of a graph with {num_nodes} nodes needs a dense {num_nodes}x{num_nodes} eigendecomposition "
            f"(at most {MAX_DENSE_NODES} nodes); set data.lap_pe_freqs=0 for such graphs"
        )
    values, vectors = np.linalg.eigh(laplacian(edge_index, num_nodes))
    kept = min(num_nodes, max_freqs)
    order = np.argsort(values, kind="stable")[:kept]
    values, vectors = np.clip(values[order], 0.0, None), vectors[:, order]
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=0, keepdims=True), NORM_EPS)
    peak = vectors[np.argmax(np.abs(vectors), axis=0), np.arange(kept)]
    vectors = vectors * np.where(peak < 0, -1.0, 1.0)
    eigvecs = np.zeros((num_nodes, max_freqs), np.float32)
    eigvals = np.zeros(max_freqs, np.float32)
    mask = np.zeros(max_freqs, np.float32)
    eigvecs[:, :kept], eigvals[:kept], mask[:kept] = vectors, values, 1.0
    return LapPE(eigvecs, eigvals, mask)


def _chunk_pe(edges_and_sizes: list[tuple[np.ndarray, int]], max_freqs: int) -> list[LapPE]:
    return [laplacian_pe(edges, n, max_freqs) for edges, n in edges_and_sizes]


def laplacian_pe_many(
    graphs: Sequence[tuple[np.ndarray, int]], max_freqs: int, workers: int | None = None, chunk: int = CHUNK
) -> list[LapPE]:
    """``laplacian_pe`` of each (edge_index, num_nodes) in ``graphs``, in order. ``workers``: processes to use (None:
    one per CPU core when there are at least PARALLEL_MIN_GRAPHS graphs, else none; 0 or 1: this process), each
    task ``chunk`` graphs. As with any spawning code, a calling script needs an ``if __name__ == "__main__"`` guard."""
    if workers is None:
        workers = min(MAX_WORKERS, os.cpu_count() or 1) if len(graphs) >= PARALLEL_MIN_GRAPHS else 0
    if workers <= 1:
        return _chunk_pe(list(graphs), max_freqs)
    chunks = [list(graphs[i : i + chunk]) for i in range(0, len(graphs), chunk)]
    saved = {name: os.environ.get(name) for name in SINGLE_THREAD_ENV}
    os.environ.update(dict.fromkeys(SINGLE_THREAD_ENV, "1"))  # spawned workers start with single-threaded BLAS
    try:
        context = multiprocessing.get_context("spawn")  # never fork a process that may run JAX's threads
        with ProcessPoolExecutor(min(workers, len(chunks)), mp_context=context) as pool:
            futures = [pool.submit(_chunk_pe, chunk, max_freqs) for chunk in chunks]
            return [pe for future in futures for pe in future.result()]
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
