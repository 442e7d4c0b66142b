"""A few batch shapes for a whole run, chosen once from one epoch of training batches, so that the jit train step
compiles two or three times, not once per combination of node, edge and width buckets.

Each batch needs (nodes + 1, edges, widest graph); bucketing the three separately (``packing.bucket_size``) gives
many combinations over a run, as they vary independently. The plan holds the per-dimension ``PLAN_QUANTILES`` of an
epoch's needs and their maximum, each rounded up to the ladder: a batch takes the smallest planned shape that holds
it, and only a batch larger than any planned shape (a later epoch's rare outlier) gets shapes of its own. The plan
is a function of the data, the seed and the batch size, so resumed runs pad exactly as uninterrupted ones."""

from collections.abc import Sequence

import numpy as np

from jax_mamba.data.graphs.graph import Graph
from jax_mamba.data.graphs.packing import bucket_size

PLAN_QUANTILES = (0.6,)  # besides the maximum
PLAN_BATCHES_MAX = 4096  # batches of the first epoch the plan reads (all of it, up to this)

Shape = tuple[int, int, int]


def batch_needs(graphs: Sequence[Graph], index: np.ndarray) -> Shape:
    """(nodes + 1, max(edges, 1), max(widest, 1)) of the graphs at ``index``: the least shape that holds them."""
    nodes = sum(graphs[i].num_nodes for i in index)
    edges = sum(graphs[i].num_edges for i in index)
    return nodes + 1, max(edges, 1), max(max(graphs[i].num_nodes for i in index), 1)


def plan_shapes(needs: np.ndarray, steps: int) -> list[Shape]:
    """Planned shapes, smallest first, from needs (batches, 3): per-dimension quantiles and the maximum."""
    shapes = []
    for q in (*PLAN_QUANTILES, 1.0):
        level = np.quantile(needs, q, axis=0, method="higher")
        shape = tuple(bucket_size(int(v), steps) for v in level)
        if shape not in shapes:
            shapes.append(shape)
    return shapes


def shape_for(needs: Sequence[Shape], plan: list[Shape], steps: int) -> Shape:
    """The smallest planned shape holding every micro-batch's needs; else the needs' own buckets (at least the
    largest planned shape, so outliers share shapes as far as they can)."""
    need = np.max(np.asarray(needs), axis=0)
    for shape in plan:
        if all(n <= s for n, s in zip(need, shape, strict=True)):
            return shape
    return tuple(max(bucket_size(int(n), steps), s) for n, s in zip(need, plan[-1], strict=True))
