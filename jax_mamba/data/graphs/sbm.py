"""Generated graph sets (no download), each a pure function of its seed; graph i comes from the generator
``default_rng([seed, i])``, so it does not depend on how many graphs are asked for.

- ``cluster_graphs``: CLUSTER-style node classification (Dwivedi et al., "Benchmarking GNNs"): a stochastic block
  model of 6 communities of 5-35 nodes, edge probability 0.55 inside a community and 0.25 across; the label of a
  node is its community; one random node per community shows its community in its feature, all others show 0.
- ``pattern_graphs``: PATTERN-style node classification: an SBM of 5 communities of 5-35 nodes (p 0.5, q 0.35)
  with random features in {0, 1, 2}, plus a planted 20-node pattern (fixed structure and features per pattern,
  internal edge probability 0.5, each pattern-to-rest pair linked with probability 0.5); label 1 on pattern nodes.
- ``graph_class_graphs``: graph classification among five random-graph families at similar sizes and mean degree
  (see GRAPH_CLASSES), so that the node count and the mean degree do not give the class away.

Node order is shuffled in every graph (no label leaks through positions); edges are listed in both directions."""

import numpy as np

from jax_mamba.data.graphs.graph import Graph

PATTERN_STREAM = 7_919  # seed-sequence entry of the planted patterns, apart from the graphs' own streams
GRAPH_CLASSES = ("sbm2", "sbm4", "ring_of_cliques", "erdos_renyi", "preferential_attachment")
"""graph_class_graphs' classes: two- and four-community SBMs (6x denser inside than across), a ring of cliques of
4-7 nodes with a few random shortcuts, an Erdős–Rényi graph and a Barabási–Albert-like preferential-attachment
graph (3 links per new node), all with 24-64 nodes and a mean degree near 6."""
MEAN_DEGREE = 6.0


def _symmetric_edges(upper: np.ndarray) -> np.ndarray:
    """edge_index (2, e) int32, both directions, from a boolean (n, n) matrix of which pairs i < j are linked."""
    upper = np.triu(upper, 1)
    senders, receivers = np.nonzero(upper | upper.T)
    return np.stack([senders, receivers]).astype(np.int32)


def _relabel(edge_index: np.ndarray, order: np.ndarray) -> np.ndarray:
    """edge_index of the same graph after node ``order[k]`` becomes node k."""
    new_id = np.empty_like(order)
    new_id[order] = np.arange(len(order))
    return new_id[edge_index].astype(np.int32)


def _block_pairs(blocks: np.ndarray, p: float, q: float, rng: np.random.Generator) -> np.ndarray:
    """Random (n, n) boolean pair matrix: probability p inside a block, q across."""
    same = blocks[:, None] == blocks[None, :]
    return rng.random((len(blocks), len(blocks))) < np.where(same, p, q)


def _one_hot(values: np.ndarray, width: int) -> np.ndarray:
    return np.eye(width, dtype=np.float32)[values]


def cluster_graphs(
    num_graphs: int,
    seed: int,
    *,
    num_classes: int = 6,
    community_sizes: tuple[int, int] = (5, 35),
    p: float = 0.55,
    q: float = 0.25,
) -> list[Graph]:
    """CLUSTER-like graphs: x (n, num_classes + 1) float32 one-hot of the shown community (0: unknown), y (n,)
    int32 community; n in [num_classes * low, num_classes * high] for community_sizes (low, high) inclusive."""
    graphs = []
    for i in range(num_graphs):
        rng = np.random.default_rng([seed, i])
        blocks = np.repeat(
            np.arange(num_classes), rng.integers(community_sizes[0], community_sizes[1] + 1, num_classes)
        )
        blocks = rng.permutation(blocks)
        edges = _symmetric_edges(_block_pairs(blocks, p, q, rng))
        shown = np.zeros(len(blocks), np.int64)
        for c in range(num_classes):
            shown[rng.choice(np.flatnonzero(blocks == c))] = c + 1
        graphs.append(Graph(_one_hot(shown, num_classes + 1), edges, blocks.astype(np.int32)))
    return graphs


def _patterns(seed: int, count: int, size: int, p: float, vocab: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` planted patterns: (linked pairs (size, size) bool, features (size,)), shared by the whole set."""
    rng = np.random.default_rng([seed, PATTERN_STREAM])
    return [(np.triu(rng.random((size, size)) < p, 1), rng.integers(0, vocab, size)) for _ in range(count)]


def pattern_graphs(
    num_graphs: int,
    seed: int,
    *,
    num_communities: int = 5,
    community_sizes: tuple[int, int] = (5, 35),
    p: float = 0.5,
    q: float = 0.35,
    pattern_size: int = 20,
    p_pattern: float = 0.5,
    q_pattern: float = 0.5,
    num_patterns: int = 1,
    vocab: int = 3,
) -> list[Graph]:
    """PATTERN-like graphs: x (n, vocab) float32 one-hot of a random value (fixed per pattern node), y (n,) int32 1 on
    the planted pattern; n in [num_communities * low + pattern_size, num_communities * high + pattern_size].

    benchmarking-GNNs' generator plants one pattern for the whole set (its documentation speaks of 100):
    ``num_patterns`` picks how many, each graph holding one drawn at random."""
    patterns = _patterns(seed, num_patterns, pattern_size, p_pattern, vocab)
    graphs = []
    for i in range(num_graphs):
        rng = np.random.default_rng([seed, i])
        blocks = np.repeat(
            np.arange(num_communities), rng.integers(community_sizes[0], community_sizes[1] + 1, num_communities)
        )
        base = len(blocks)
        pattern_pairs, pattern_values = patterns[rng.integers(num_patterns)]
        pairs = np.zeros((base + pattern_size, base + pattern_size), bool)
        pairs[:base, :base] = _block_pairs(blocks, p, q, rng)
        pairs[base:, base:] = pattern_pairs
        pairs[:base, base:] = rng.random((base, pattern_size)) < q_pattern
        values = np.concatenate([rng.integers(0, vocab, base), pattern_values])
        labels = np.concatenate([np.zeros(base, np.int32), np.ones(pattern_size, np.int32)])
        order = rng.permutation(base + pattern_size)
        edges = _relabel(_symmetric_edges(pairs), order)
        graphs.append(Graph(_one_hot(values[order], vocab), edges, labels[order]))
    return graphs


def _sbm_pairs(n: int, communities: int, rng: np.random.Generator, ratio: float = 6.0) -> np.ndarray:
    """An SBM on n nodes in ``communities`` near-equal blocks, p_in = ratio * q_out, mean degree about 6."""
    blocks = np.arange(n) % communities
    inside = n / communities - 1
    p_in = min(1.0, MEAN_DEGREE / (inside + (n - inside - 1) / ratio))
    return _block_pairs(blocks, p_in, p_in / ratio, rng)


def _ring_of_cliques_pairs(n: int, rng: np.random.Generator) -> np.ndarray:
    """Cliques of 4-7 nodes (the last takes what is left, merged into the previous one if under 4) in a ring, each
    linked to the next by one edge, plus n // 10 random shortcuts."""
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(4, 8)))
    sizes[-1] -= sum(sizes) - n
    if sizes[-1] < 4 and len(sizes) > 1:
        last = sizes.pop()
        sizes[-1] += last
    pairs = np.zeros((n, n), bool)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for start, size in zip(starts, sizes, strict=True):
        pairs[start : start + size, start : start + size] = True
    for k in range(len(sizes)):
        a = starts[k] + rng.integers(sizes[k])
        nxt = (k + 1) % len(sizes)
        b = starts[nxt] + rng.integers(sizes[nxt])
        pairs[a, b] = pairs[b, a] = True
    for _ in range(n // 10):
        a, b = rng.integers(n, size=2)
        pairs[a, b] = pairs[b, a] = True
    return pairs | pairs.T


def _preferential_pairs(n: int, rng: np.random.Generator, links: int = 3) -> np.ndarray:
    """Barabási–Albert-like growth from a (links + 1)-clique: each new node links to ``links`` distinct earlier
    nodes, chosen with probability proportional to their degree."""
    pairs = np.zeros((n, n), bool)
    pairs[: links + 1, : links + 1] = True
    np.fill_diagonal(pairs, False)
    for new in range(links + 1, n):
        degree = pairs[:new, :new].sum(axis=1).astype(np.float64)
        targets = rng.choice(new, size=links, replace=False, p=degree / degree.sum())
        pairs[new, targets] = pairs[targets, new] = True
    return pairs


def graph_class_graphs(
    num_graphs: int, seed: int, *, node_range: tuple[int, int] = (24, 64), vocab: int = 3
) -> list[Graph]:
    """Balanced graph classification over GRAPH_CLASSES: y () int32 the class index; x (n, 1) int32 a random
    category in [0, vocab) (noise: only the structure tells the classes apart); edge_attr (e, 1) int32, 1 where
    both ends share their category, else 0; n in node_range (inclusive)."""
    labels = np.random.default_rng([seed, PATTERN_STREAM]).permutation(np.arange(num_graphs) % len(GRAPH_CLASSES))
    graphs = []
    for i, label in enumerate(labels.tolist()):
        rng = np.random.default_rng([seed, i])
        n = int(rng.integers(node_range[0], node_range[1] + 1))
        name = GRAPH_CLASSES[label]
        if name == "sbm2":
            pairs = _sbm_pairs(n, 2, rng)
        elif name == "sbm4":
            pairs = _sbm_pairs(n, 4, rng)
        elif name == "ring_of_cliques":
            pairs = _ring_of_cliques_pairs(n, rng)
        elif name == "erdos_renyi":
            pairs = rng.random((n, n)) < MEAN_DEGREE / (n - 1)
        else:
            pairs = _preferential_pairs(n, rng)
        order = rng.permutation(n)
        edges = _relabel(_symmetric_edges(pairs), order)
        values = rng.integers(0, vocab, n)
        same = (values[edges[0]] == values[edges[1]]).astype(np.int32)
        graphs.append(Graph(values[:, None].astype(np.int32), edges, np.int32(label), same[:, None]))
    return graphs
