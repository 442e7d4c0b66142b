"""Graph-Mamba (Wang et al. 2024; bowang-lab/Graph-Mamba's ``GPSModel``) from a ``GraphMambaConfig``: encoders,
``n_layers`` GPS layers (local GatedGCN + global Mamba over degree-ordered nodes), a node or mean-pooled graph head.

Inputs are padded graph batches (``jax_mamba.data.graphs.packing``): node_feat (N, F), edge_feat (E, Fe) when the
data has edge features, senders/receivers (E,), node_graph (N,), node_mask (N,), edge_mask (E,), slots (B, M), and
eigvecs/eigvals/eig_mask (N, K) with LapPE. Optional, to replay the reference's random choices exactly (parity):
``order_noise`` (n_layers, orderings, N) uniform [0, 1) tie-breaking noise and ``eig_signs`` (K,) +-1."""

import itertools

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.configs.schema import GraphMambaConfig
from jax_mamba.modules.gated_gcn import torch_linear
from jax_mamba.modules.gps_layer import GPSLayer
from jax_mamba.modules.graph_encoders import CategoricalEncoder, DummyEdgeEncoder, LapPEEncoder, random_signs
from jax_mamba.modules.impl import compute_dtype_for

EVAL_NOISE_SEED = 0  # evaluation's orderings come from this fixed key when no rngs are given: repeatable evaluation


class FeatureEncoder(nnx.Module):
    """Node features -> (N, dim) (node_encoder, plus lap_pe concatenated), edge features -> (E, dim)."""

    def __init__(self, cfg: GraphMambaConfig, *, dtype, rngs: nnx.Rngs):
        dim, pe = cfg.dim_hidden, cfg.lap_pe_dim
        if cfg.node_feature_kind == "categorical":
            self.node_encoder = CategoricalEncoder(cfg.node_vocab, dim - pe, rngs=rngs)
        else:
            self.node_encoder = torch_linear(cfg.node_in_dim, dim - pe, dtype=dtype, rngs=rngs)
        self.lap_pe = LapPEEncoder(pe, cfg.lap_pe_layers, dtype=dtype, rngs=rngs) if pe else None
        if cfg.edge_feature_kind == "categorical":
            self.edge_encoder = CategoricalEncoder(cfg.edge_vocab, dim, rngs=rngs)
        elif cfg.edge_feature_kind == "dense":
            self.edge_encoder = torch_linear(cfg.edge_in_dim, dim, dtype=dtype, rngs=rngs)
        else:
            self.edge_encoder = DummyEdgeEncoder(dim, rngs=rngs)
        self.edge_kind = cfg.edge_feature_kind

    def __call__(self, graph: dict[str, jax.Array], signs: jax.Array | None) -> tuple[jax.Array, jax.Array]:
        h = self.node_encoder(graph["node_feat"]).astype(jnp.float32)
        if self.lap_pe is not None:
            h = jnp.concatenate([h, self.lap_pe(graph, signs)], axis=-1)
        if self.edge_kind == "none":
            e = self.edge_encoder(graph["senders"].shape[0])
        else:
            e = self.edge_encoder(graph["edge_feat"])
        return h, e.astype(jnp.float32)


class PostMP(nnx.Module):
    """GraphGym's ``MLP`` head: (layers - 1) x [Linear -> ReLU -> L2 normalization per row], then a Linear.
    Parameters: layers.{i}.kernel/bias."""

    def __init__(self, dim: int, out: int, layers: int, *, dtype, rngs: nnx.Rngs):
        sizes = [dim] * layers + [out]
        self.layers = nnx.List([torch_linear(a, b, dtype=dtype, rngs=rngs) for a, b in itertools.pairwise(sizes)])

    def __call__(self, h: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            h = jax.nn.relu(layer(h).astype(jnp.float32))
            h = h / jnp.maximum(jnp.linalg.norm(h, axis=-1, keepdims=True), 1e-12)
        return self.layers[-1](h).astype(jnp.float32)


def mean_pool(h: jax.Array, graph: dict[str, jax.Array]) -> jax.Array:
    """(N, dim) -> (B, dim): the mean over each graph's real nodes (0 for an empty graph)."""
    batch = graph["slots"].shape[0]
    mask = graph["node_mask"][:, None]
    sums = jax.ops.segment_sum(h * mask, graph["node_graph"], batch + 1)[:batch]
    counts = jax.ops.segment_sum(mask, graph["node_graph"], batch + 1)[:batch]
    return sums / jnp.maximum(counts, 1.0)


class GraphMamba(nnx.Module):
    """Returns float32 logits or predictions: (N, num_outputs) per node (node tasks) or (B, num_outputs) per graph.

    Training mode (the default; ``.eval()`` switches) uses batch statistics, dropout, one random ordering per layer
    and random LapPE signs, all from the ``dropout`` stream of the ``rngs`` passed (or the batch's ``order_noise`` /
    ``eig_signs``); eval mode uses running statistics and averages ``eval_orderings`` orderings."""

    def __init__(self, cfg: GraphMambaConfig, *, rngs: nnx.Rngs):
        dtype = compute_dtype_for(cfg)
        self.cfg = cfg
        self.encoder = FeatureEncoder(cfg, dtype=dtype, rngs=rngs)
        self.layers = nnx.List(
            [
                GPSLayer(
                    cfg.dim_hidden,
                    dropout=cfg.dropout,
                    d_state=cfg.d_state,
                    d_conv=cfg.d_conv,
                    expand=cfg.expand,
                    eval_orderings=cfg.eval_orderings,
                    dtype=dtype,
                    impl=cfg.impl,
                    rngs=rngs,
                )
                for _ in range(cfg.n_layers)
            ]
        )
        self.post_mp = PostMP(cfg.dim_hidden, cfg.num_outputs, cfg.head_layers, dtype=dtype, rngs=rngs)
        self.deterministic = False  # set by .train() / .eval(), as on nnx.Dropout

    @property
    def training(self) -> bool:
        return not self.deterministic

    def _random_inputs(self, graph: dict[str, jax.Array], rngs: nnx.Rngs | None) -> tuple[jax.Array, jax.Array | None]:
        """(order noise (n_layers, orderings, N), LapPE signs (K,) or None), from the batch if it carries them."""
        flip_signs = self.training and bool(self.cfg.lap_pe_dim)
        noise = graph.get("order_noise")
        signs = graph.get("eig_signs") if flip_signs else None
        if noise is not None and (signs is not None or not flip_signs):
            return noise, signs
        if rngs is not None:
            key = rngs.dropout()
        elif not self.training:
            key = jax.random.key(EVAL_NOISE_SEED)
        else:
            raise ValueError("GraphMamba in training needs rngs with a 'dropout' stream (or call .eval())")
        noise_key, sign_key = jax.random.split(key)
        if noise is None:
            orderings = 1 if self.training else self.cfg.eval_orderings
            shape = (self.cfg.n_layers, orderings, graph["node_mask"].shape[0])
            noise = jax.random.uniform(noise_key, shape, jnp.float32)
        if flip_signs and signs is None:
            signs = random_signs(sign_key, graph["eigvecs"].shape[1])
        return noise, signs

    def __call__(self, graph: dict[str, jax.Array], rngs: nnx.Rngs | None = None) -> jax.Array:
        noise, signs = self._random_inputs(graph, rngs)
        with jax.named_scope("encoder"):
            h, e = self.encoder(graph, signs)
        for i, layer in enumerate(self.layers):
            if self.cfg.remat:
                h, e = nnx.remat(lambda m, h, e, g, n, r: m(h, e, g, n, r))(layer, h, e, graph, noise[i], rngs)
            else:
                h, e = layer(h, e, graph, noise[i], rngs)
        with jax.named_scope("head"):
            if self.cfg.task_level == "graph":
                h = mean_pool(h, graph)
            return self.post_mp(h)
