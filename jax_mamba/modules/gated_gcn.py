"""GatedGCN (Bresson & Laurent 2017, "Residual Gated Graph ConvNets") as GraphGPS's ``GatedGCNLayer``, the local
model of Graph-Mamba's GPS layers: edge-gated message passing with edge-feature updates, BatchNorm, ReLU, dropout,
residual. Message passing is ``jax.ops.segment_sum`` over an edge list; padding rows are masked out of the
batch statistics (see ``jax_mamba.data.graphs.packing`` for the padded batch layout)."""

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.init import torch_default_uniform
from jax_mamba.modules.layers import Linear
from jax_mamba.modules.vision_layers import BatchNorm


def torch_linear(in_features: int, out_features: int, *, dtype, rngs: nnx.Rngs, bias: bool = True) -> Linear:
    """torch.nn.Linear / PyG Linear with torch's default init: kernel and bias U(+-1/sqrt(in_features))."""
    init = torch_default_uniform(in_features)
    layer = Linear(in_features, out_features, bias=bias, dtype=dtype, kernel_init=init, rngs=rngs)
    if bias:
        layer.bias[...] = init(rngs.params(), (out_features,))
    return layer


class GatedGCNLayer(nnx.Module):
    """For each edge j -> i: e_ij = D x_i + E x_j + C e_ij, sigma_ij = sigmoid(e_ij); for each node
    x_i' = A x_i + sum_j sigma_ij * B x_j / (sum_j sigma_ij + 1e-6). Then BatchNorm, ReLU and dropout on nodes
    (x') and edges (e_ij), and residual connections to the inputs.

    Parameters: {A,B,C,D,E}.kernel (dim, dim) and .bias (dim,); bn_node_x.*, bn_edge_e.* (BatchNorm)."""

    def __init__(self, dim: int, dropout: float, *, dtype, rngs: nnx.Rngs):
        for name in "ABCDE":
            setattr(self, name, torch_linear(dim, dim, dtype=dtype, rngs=rngs))
        self.bn_node_x = BatchNorm(dim)
        self.bn_edge_e = BatchNorm(dim)
        self.dropout = nnx.Dropout(dropout)

    @jax.named_scope("gated_gcn")
    def __call__(
        self, x: jax.Array, e: jax.Array, graph: dict[str, jax.Array], rngs: nnx.Rngs | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """x (N, dim) node and e (E, dim) edge states (float32) -> the same, updated. ``graph``: ``senders``,
        ``receivers`` (E,) int32, ``node_mask`` (N,), ``edge_mask`` (E,) float32.

        Gathers and segment sums run in float32 whatever the compute dtype: their gradients are scatter-adds,
        which in bfloat16 fall back to compare-and-swap loops on a GPU (and round each partial sum)."""
        senders, receivers = graph["senders"], graph["receivers"]
        num_nodes = x.shape[0]
        dim = x.shape[1]
        ax, dx = self.A(x), self.D(x).astype(jnp.float32)
        bx_ex = jnp.concatenate([self.B(x), self.E(x)], axis=1).astype(jnp.float32)
        from_sender = bx_ex[senders]  # one (E, 2 dim) gather, so one scatter-add in the backward
        e_ij = dx[receivers] + from_sender[:, dim:] + self.C(e).astype(jnp.float32)
        sigma = jax.nn.sigmoid(e_ij)
        numerator = jax.ops.segment_sum(sigma * from_sender[:, :dim], receivers, num_nodes)
        denominator = jax.ops.segment_sum(sigma, receivers, num_nodes)
        h = ax.astype(jnp.float32) + numerator / (denominator + 1e-6)
        h = jax.nn.relu(self.bn_node_x(h, graph["node_mask"]))
        e_out = jax.nn.relu(self.bn_edge_e(e_ij, graph["edge_mask"]))
        return x + self.dropout(h, rngs=rngs), e + self.dropout(e_out, rngs=rngs)
