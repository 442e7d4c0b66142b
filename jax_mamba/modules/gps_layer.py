"""Graph-Mamba's GPS layer (bowang-lab/Graph-Mamba, ``GPSLayer`` with ``CustomGatedGCN+Mamba_Hybrid_Degree_Noise``):
a local GatedGCN and a global Mamba-1 over each graph's nodes ordered by degree, summed, then a feed-forward block.

The global branch sorts each graph's nodes by out-degree plus uniform noise in [0, 1) (random tie-breaking: the
lowest degrees first, so the best-connected nodes read the whole sequence), packs them densely per graph
(graph-major, real nodes first in each row), runs the Mamba and scatters its outputs back to node order. Training
draws one ordering per layer and step; evaluation averages ``eval_orderings`` orderings, as the reference does.
The Mamba is causal and padding slots follow a row's real nodes, so padding never reaches a real node's output."""

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.gated_gcn import GatedGCNLayer, torch_linear
from jax_mamba.modules.mamba_simple import Mamba
from jax_mamba.modules.vision_layers import BatchNorm


def out_degree(graph: dict[str, jax.Array]) -> jax.Array:
    """(N,) float32: real edges leaving each node (PyG's ``degree(edge_index[0])``)."""
    return jax.ops.segment_sum(graph["edge_mask"], graph["senders"], graph["node_mask"].shape[0])


def degree_orderings(graph: dict[str, jax.Array], noise: jax.Array) -> jax.Array:
    """noise (orderings, N) in [0, 1) -> permutations (orderings, N) int32: each graph's block of nodes sorted by
    degree + noise (stable), graphs kept in place, padding nodes (graph index B) last."""
    key = out_degree(graph)[None, :] + noise
    graph_of = jnp.broadcast_to(graph["node_graph"], key.shape)
    return jax.vmap(lambda k, g: jnp.lexsort((k, g)))(key, graph_of).astype(jnp.int32)


def to_dense(h: jax.Array, perm: jax.Array, slots: jax.Array) -> jax.Array:
    """h (N, dim), perm (O, N), slots (B, M) -> (O, B, M, dim): row b holds graph b's nodes in the order ``perm``
    gives them (``slots`` are positions in that order; padding slots read padding nodes, which sort last)."""
    return h[jnp.take(perm, slots, axis=1)]


def from_dense(dense: jax.Array, perm: jax.Array, graph: dict[str, jax.Array]) -> jax.Array:
    """dense (O, B, M, dim) -> (O, N, dim): each real node's output from its slot. Padding nodes read any slots,
    spread so that the gather's gradient (a scatter-add) does not pile onto one slot."""
    orderings, batch, width, dim = dense.shape
    num_nodes = perm.shape[1]
    position = jnp.arange(num_nodes, dtype=jnp.int32)
    graph_of = jnp.minimum(graph["node_graph"], batch - 1)
    flat_slot = graph_of * width + position - jnp.asarray(graph["slots"])[graph_of, 0]  # slot of sorted position p
    flat_slot = jnp.where(graph["node_mask"] > 0, flat_slot, position % (batch * width))
    inverse = jnp.zeros_like(perm).at[jnp.arange(orderings)[:, None], perm].set(position)  # node -> position
    flat = dense.reshape(orderings, batch * width, dim)
    return jnp.take_along_axis(flat, jnp.take(flat_slot, inverse)[..., None], axis=1)


class GPSLayer(nnx.Module):
    """h_local = BN(GatedGCN(h, e)); h_attn = BN(h + dropout(Mamba over degree-ordered nodes)); h = h_local + h_attn;
    h = BN(h + FFN(h)) with FFN = Linear(dim, 2 dim) -> ReLU -> dropout -> Linear(2 dim, dim) -> dropout.

    Parameters: local_model.* (GatedGCNLayer), self_attn.* (Mamba: mamba-ssm's names), norm1_local.*,
    norm1_attn.*, ff_linear1.*, ff_linear2.*, norm2.* (BatchNorm)."""

    def __init__(
        self,
        dim: int,
        *,
        dropout: float,
        d_state: int,
        d_conv: int,
        expand: int,
        eval_orderings: int,
        dtype,
        impl: str,
        rngs: nnx.Rngs,
    ):
        self.local_model = GatedGCNLayer(dim, dropout, dtype=dtype, rngs=rngs)
        self.self_attn = Mamba(dim, d_state=d_state, d_conv=d_conv, expand=expand, dtype=dtype, impl=impl, rngs=rngs)
        self.norm1_local = BatchNorm(dim)
        self.norm1_attn = BatchNorm(dim)
        self.ff_linear1 = torch_linear(dim, 2 * dim, dtype=dtype, rngs=rngs)
        self.ff_linear2 = torch_linear(2 * dim, dim, dtype=dtype, rngs=rngs)
        self.norm2 = BatchNorm(dim)
        self.dropout = nnx.Dropout(dropout)
        self.eval_orderings = eval_orderings

    @jax.named_scope("global_mamba")
    def global_branch(self, h: jax.Array, graph: dict[str, jax.Array], noise: jax.Array) -> jax.Array:
        """h (N, dim) float32, noise (O, N) -> the Mamba's output per node averaged over the O orderings, float32."""
        with jax.named_scope("order_pack"):
            perm = degree_orderings(graph, noise)
            dense = to_dense(h, perm, graph["slots"])
        orderings, batch, width, dim = dense.shape
        with jax.named_scope("mamba"):
            out = self.self_attn(dense.reshape(orderings * batch, width, dim)).reshape(dense.shape)
        with jax.named_scope("order_pack"):
            return jnp.mean(from_dense(out, perm, graph).astype(jnp.float32), axis=0)

    @jax.named_scope("gps_layer")
    def __call__(
        self,
        h: jax.Array,
        e: jax.Array,
        graph: dict[str, jax.Array],
        noise: jax.Array,
        rngs: nnx.Rngs | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """h (N, dim), e (E, dim) float32; noise (orderings, N) uniform [0, 1) tie-breaking -> (h, e) updated,
        zero on padding rows."""
        mask = graph["node_mask"]
        h_local, e = self.local_model(h, e, graph, rngs)
        h_local = self.norm1_local(h_local, mask)
        h_attn = h + self.dropout(self.global_branch(h, graph, noise), rngs=rngs)
        h_attn = self.norm1_attn(h_attn, mask)
        h = h_local + h_attn
        with jax.named_scope("ffn"):
            ff = self.dropout(jax.nn.relu(self.ff_linear1(h)), rngs=rngs)
            h = h + self.dropout(self.ff_linear2(ff), rngs=rngs).astype(jnp.float32)
        # Padding rows restart from zero in every layer (the masked norm2 writes zeros there): left alone they grow
        # layer after layer (16 layers overflow float32), and one inf in a masked reduction (0 * inf) turns the real
        # rows' batch statistics into NaN.
        return self.norm2(h, mask), jnp.where(graph["edge_mask"][:, None] > 0, e, 0.0)
