"""Graph-Mamba's input encoders (GraphGPS's ``FeatureEncoder``): node features to ``dim_hidden - lap_pe_dim``
channels (a Linear on dense features, or OGB's Atom/Bond-encoder style sum of one embedding per categorical
column), Laplacian positional encodings (GraphGPS's ``LapPENodeEncoder`` with a DeepSet) concatenated to them, and
edge features to ``dim_hidden`` channels (a Linear, summed embeddings, or one learned vector for every edge when the
data has no edge features: GraphGPS's ``DummyEdge``). Outputs are float32."""

import itertools

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.gated_gcn import torch_linear


class CategoricalEncoder(nnx.Module):
    """OGB's AtomEncoder/BondEncoder: features int (rows, columns) -> the sum over columns of an embedding per
    column (xavier-uniform init). Parameters: embeddings.{i}.embedding (vocab[i], dim)."""

    def __init__(self, vocab: list[int], dim: int, *, rngs: nnx.Rngs):
        init = nnx.initializers.xavier_uniform()
        self.embeddings = nnx.List(
            [nnx.Embed(v, dim, param_dtype=jnp.float32, embedding_init=init, rngs=rngs) for v in vocab]
        )

    def __call__(self, features: jax.Array) -> jax.Array:
        return sum(emb(features[:, i]) for i, emb in enumerate(self.embeddings))


class DummyEdgeEncoder(nnx.Module):
    """One learned vector for every edge (torch.nn.Embedding(1, dim): N(0, 1) init). Parameter: embedding (1, dim)."""

    def __init__(self, dim: int, *, rngs: nnx.Rngs):
        self.embedding = nnx.Param(jax.random.normal(rngs.params(), (1, dim), jnp.float32))

    def __call__(self, num_edges: int) -> jax.Array:
        return jnp.broadcast_to(self.embedding[...], (num_edges, self.embedding.shape[1]))


class LapPEEncoder(nnx.Module):
    """DeepSet over a node's Laplacian eigenpairs: each (eigenvector entry, eigenvalue) pair -> linear_A -> ReLU ->
    [Linear -> ReLU] * (layers - 1), zeroed at the padding frequencies, summed over frequencies: (N, pe_dim).

    Training flips each eigenvector's sign at random (one sign per frequency for the whole batch; eigenvectors are
    defined up to sign). Parameters: linear_A (2, 2 pe_dim, or pe_dim for one layer), layers.{i}."""

    def __init__(self, pe_dim: int, layers: int, *, dtype, rngs: nnx.Rngs):
        width = pe_dim if layers == 1 else 2 * pe_dim
        self.linear_A = torch_linear(2, width, dtype=dtype, rngs=rngs)
        sizes = [width] * (layers - 1) + [pe_dim] if layers > 1 else []
        self.layers = nnx.List([torch_linear(a, b, dtype=dtype, rngs=rngs) for a, b in itertools.pairwise(sizes)])

    def __call__(self, graph: dict[str, jax.Array], signs: jax.Array | None) -> jax.Array:
        """``graph``: eigvecs, eigvals, eig_mask (N, K); ``signs`` (K,) +-1 (training) or None."""
        vecs = graph["eigvecs"] if signs is None else graph["eigvecs"] * signs
        h = jnp.stack([vecs, graph["eigvals"]], axis=-1)  # (N, K, 2)
        h = jax.nn.relu(self.linear_A(h))
        for layer in self.layers:
            h = jax.nn.relu(layer(h))
        return jnp.sum(h.astype(jnp.float32) * graph["eig_mask"][..., None], axis=1)


def random_signs(key: jax.Array, count: int) -> jax.Array:
    """(count,) float32 of +-1 with equal probability."""
    return jnp.where(jax.random.bernoulli(key, 0.5, (count,)), 1.0, -1.0).astype(jnp.float32)
