"""Graph-Mamba in Flax: padding never changes a real node's output (outputs, gradients, batch statistics), the degree
ordering and the dense packing against direct NumPy, eval averaging over orderings, the Pallas scan inside the
model, config checks. (Whole-model parity with the PyTorch model: tests/compare.)"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compare.parity.tolerances import assert_close, compare_to_reference_noise, gradient_floor
from jax_mamba.configs import load_config
from jax_mamba.configs.schema import GraphMambaConfig, validate_graph_mamba
from jax_mamba.data.graphs.graph import Graph
from jax_mamba.data.graphs.lap_pe import laplacian_pe
from jax_mamba.data.graphs.packing import pack, pack_sizes
from jax_mamba.models import GraphMamba, ParamLayout
from jax_mamba.modules.gps_layer import degree_orderings, from_dense, to_dense

K = 4  # LapPE frequencies in these tests


def random_graphs(rng: np.random.Generator, count: int, *, node_task: bool = True, classes: int = 3) -> list[Graph]:
    """Graphs of 1 to 13 nodes (one of a single node, one without edges), random undirected edges."""
    graphs = []
    for i in range(count):
        n = 1 if i == 0 else int(rng.integers(2, 14))
        pairs = rng.integers(0, n, (2, 0 if i == 1 else int(rng.integers(1, 2 * n + 1))))
        pairs = pairs[:, pairs[0] != pairs[1]]
        edge_index = np.concatenate([pairs, pairs[::-1]], axis=1)
        y = rng.integers(0, classes, n) if node_task else rng.integers(0, 2, classes).astype(np.float32)
        graphs.append(Graph(x=rng.normal(size=(n, 5)).astype(np.float32), edge_index=edge_index, y=y))
    return graphs


def small(**changes) -> GraphMambaConfig:
    base = dict(
        dim_hidden=16,
        n_layers=2,
        node_in_dim=5,
        lap_pe_dim=4,
        num_outputs=3,
        head_layers=2,
        eval_orderings=3,
        compute_dtype="float32",
        impl="reference",
    )
    return GraphMambaConfig(**{**base, **changes})


def packed(graphs: list[Graph], batch_size: int, min_sizes=None) -> dict:
    pe = [laplacian_pe(g.edge_index, g.num_nodes, K) for g in graphs]
    return {k: jnp.asarray(v) for k, v in pack(graphs, batch_size, 4, min_sizes, pe=pe).items()}


def with_noise(batch: dict, noise: np.ndarray, real: int) -> dict:
    """The batch with tie-breaking noise (layers, orderings, real nodes) placed on its real nodes, and fixed signs."""
    full = np.zeros((*noise.shape[:2], batch["node_mask"].shape[0]), np.float32)
    full[..., :real] = noise
    return {**batch, "order_noise": jnp.asarray(full), "eig_signs": jnp.asarray([1.0, -1.0, -1.0, 1.0])}


@pytest.mark.parametrize("level", ["node", "graph"])
def test_padding_changes_no_real_output(level, rng):
    cfg = small(task_level=level, task_type="multiclass" if level == "node" else "multilabel")
    graphs = random_graphs(rng, 5, node_task=level == "node")
    real = sum(g.num_nodes for g in graphs)
    tight = packed(graphs, 5)
    loose = packed(graphs, 7, tuple(2 * s for s in pack_sizes(graphs, 4)))  # more nodes, edges, slots, graphs
    layout, params, state = ParamLayout.split(GraphMamba(cfg, rngs=nnx.Rngs(int(rng.integers(1 << 30)))))
    rows = real if level == "node" else len(graphs)
    for mode, orderings in (("train", 1), ("eval", cfg.eval_orderings)):
        noise = rng.uniform(size=(cfg.n_layers, orderings, real)).astype(np.float32)

        def run(p, batch, mode=mode):
            model = layout.merge(p, state)
            model.train() if mode == "train" else model.eval()
            out = model(batch)
            return jnp.sum(jnp.sin(out[:rows])), (out[:rows], layout.state_of(model))

        results = []
        for batch in (tight, loose):
            grad_fn = jax.jit(jax.value_and_grad(run, has_aux=True))
            (_, (out, new_state)), grads = grad_fn(params, with_noise(batch, noise, real))
            assert np.isfinite(np.asarray(out)).all()
            results.append((out, new_state, grads))
        (out_a, state_a, grads_a), (out_b, state_b, grads_b) = results
        assert_close(f"{mode} outputs", out_b, out_a, jnp.float32)
        for name in state_a:
            assert_close(f"{mode} state {name}", state_b[name], state_a[name], jnp.float32)
        floor = gradient_floor(grads_a)  # gradients zero up to rounding (biases before a BatchNorm)
        for name in grads_a:
            assert_close(f"{mode} grad {name}", grads_b[name], grads_a[name], jnp.float32, floor=floor)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_gps_layer_keeps_padding_rows_out_and_returns_them_as_zeros(rng, mode):
    """Whatever padding rows hold on entry (here 1e6), real rows, batch statistics and gradients match a run with
    zero padding, and the layer hands back zeros there, in training and in eval (running statistics): deep stacks
    (16 layers at CLUSTER) cannot overflow."""
    cfg = small(dropout=0.0)
    graphs = random_graphs(rng, 4)
    batch = packed(graphs, 5, tuple(2 * s for s in pack_sizes(graphs, 4)))
    layout, params, state = ParamLayout.split(GraphMamba(cfg, rngs=nnx.Rngs(int(rng.integers(1 << 30)))))
    node_real, edge_real = batch["node_mask"][:, None] > 0, batch["edge_mask"][:, None] > 0
    h = jnp.where(node_real, jnp.asarray(rng.normal(size=(node_real.shape[0], 16)), jnp.float32), 0.0)
    e = jnp.where(edge_real, jnp.asarray(rng.normal(size=(edge_real.shape[0], 16)), jnp.float32), 0.0)
    noise = jnp.asarray(rng.uniform(size=(1, node_real.shape[0])), jnp.float32)

    def run(p, h, e):
        model = layout.merge(p, state)
        if mode == "eval":
            model.eval()
        out_h, out_e = model.layers[0](h, e, batch, noise)
        loss = jnp.sum(jnp.sin(jnp.where(node_real, out_h, 0.0))) + jnp.sum(jnp.cos(jnp.where(edge_real, out_e, 0.0)))
        return loss, (out_h, out_e, layout.state_of(model))

    grad_fn = jax.jit(jax.value_and_grad(run, has_aux=True))
    (_, (h_a, e_a, state_a)), grads_a = grad_fn(params, h, e)
    (_, (h_b, e_b, state_b)), grads_b = grad_fn(params, jnp.where(node_real, h, 1e6), jnp.where(edge_real, e, 1e6))
    assert not np.asarray(h_b)[~np.asarray(node_real[:, 0])].any()
    assert not np.asarray(e_b)[~np.asarray(edge_real[:, 0])].any()
    assert_close("node states", h_b, h_a, jnp.float32)
    assert_close("edge states", e_b, e_a, jnp.float32)
    for name in state_a:
        assert_close(f"batch statistics {name}", state_b[name], state_a[name], jnp.float32)
    floor = gradient_floor(grads_a)
    for name in grads_a:
        assert np.isfinite(np.asarray(grads_b[name])).all(), name
        assert_close(f"grad {name}", grads_b[name], grads_a[name], jnp.float32, floor=floor)


def test_degree_ordering_and_dense_packing_against_numpy(rng):
    graphs = random_graphs(rng, 4)
    batch = packed(graphs, 4)
    num_nodes = batch["node_mask"].shape[0]
    noise = rng.uniform(size=(2, num_nodes)).astype(np.float32)
    perm = np.asarray(degree_orderings(batch, jnp.asarray(noise)))
    senders, edge_mask = np.asarray(batch["senders"]), np.asarray(batch["edge_mask"])
    degree = np.bincount(senders[edge_mask > 0], minlength=num_nodes)
    offset = 0
    for g in graphs:
        block = np.arange(offset, offset + g.num_nodes)
        for o in range(2):
            expected = block[np.argsort(degree[block] + noise[o, block], kind="stable")]
            np.testing.assert_array_equal(perm[o, block], expected)
        offset += g.num_nodes
    h = jnp.asarray(rng.normal(size=(num_nodes, 3)).astype(np.float32))
    dense = np.asarray(to_dense(h, jnp.asarray(perm), batch["slots"]))
    for b, g in enumerate(graphs):
        start = int(np.asarray(batch["slots"])[b, 0])
        sorted_nodes = perm[0, start : start + g.num_nodes]
        np.testing.assert_array_equal(dense[0, b, : g.num_nodes], np.asarray(h)[sorted_nodes])
    back = np.asarray(from_dense(jnp.asarray(dense), jnp.asarray(perm), batch))
    real = np.asarray(batch["node_mask"]) > 0
    np.testing.assert_array_equal(back[0][real], np.asarray(h)[real])
    np.testing.assert_array_equal(back[1][real], np.asarray(h)[real])


def test_eval_averages_the_orderings(rng):
    cfg = small()
    graphs = random_graphs(rng, 3)
    real = sum(g.num_nodes for g in graphs)
    batch = with_noise(packed(graphs, 3), rng.uniform(size=(cfg.n_layers, 3, real)).astype(np.float32), real)
    model = GraphMamba(cfg, rngs=nnx.Rngs(0))
    model.eval()
    h, _ = model.encoder(batch, None)
    layer, noise = model.layers[0], batch["order_noise"][0]
    one_at_a_time = [layer.global_branch(h, batch, noise[o : o + 1]) for o in range(3)]
    assert_close("mean of orderings", layer.global_branch(h, batch, noise), sum(one_at_a_time) / 3, jnp.float32)
    first = np.asarray(model(batch))
    assert np.isfinite(first).all()
    np.testing.assert_array_equal(np.asarray(model(batch)), first)  # no hidden randomness in eval


def test_training_draws_orderings_from_rngs_and_refuses_without(rng):
    cfg = small(dropout=0.0)
    batch = packed(random_graphs(rng, 3), 3)
    model = GraphMamba(cfg, rngs=nnx.Rngs(0))
    a, b = model(batch, nnx.Rngs(dropout=1)), model(batch, nnx.Rngs(dropout=2))
    assert not np.allclose(np.asarray(a), np.asarray(b))  # orderings and LapPE signs differ
    with pytest.raises(ValueError, match="rngs"):
        model(batch)


def _impl_outputs_and_grads(cfg: GraphMambaConfig, batch: dict, rows: int) -> dict:
    outs = {}
    for impl in ("reference", "pallas"):
        layout, params, state = ParamLayout.split(GraphMamba(dataclasses.replace(cfg, impl=impl), rngs=nnx.Rngs(3)))

        def loss(p, layout=layout, state=state):
            out = layout.merge(p, state)(batch)[:rows]
            return jnp.sum(out * jnp.cos(out)), out

        (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        outs[impl] = (out, grads)
    return outs


def test_pallas_scan_inside_the_model_matches_reference(rng):
    cfg = small(n_layers=1, lap_pe_dim=0, head_layers=1)
    graphs = random_graphs(rng, 3)
    real = sum(g.num_nodes for g in graphs)
    batch = with_noise(packed(graphs, 3), rng.uniform(size=(1, 1, real)).astype(np.float32), real)
    outs = _impl_outputs_and_grads(cfg, batch, real)
    assert_close("outputs", outs["pallas"][0], outs["reference"][0], jnp.float32)
    floor = gradient_floor(outs["reference"][1])
    for name, g in outs["reference"][1].items():
        assert_close(f"grad {name}", outs["pallas"][1][name], g, jnp.float32, floor=floor)


@pytest.mark.gpu
def test_gpu_pallas_model_matches_reference_in_bfloat16(rng):
    """The GPU kernels inside the whole model (bf16 compute, 64 graphs of up to 13 nodes) against the reference."""
    cfg = small(n_layers=2, dim_hidden=64, compute_dtype="bfloat16")
    graphs = random_graphs(rng, 64)
    real = sum(g.num_nodes for g in graphs)
    batch = with_noise(packed(graphs, 64), rng.uniform(size=(2, 1, real)).astype(np.float32), real)
    outs = _impl_outputs_and_grads(cfg, batch, real)
    exact = _impl_outputs_and_grads(dataclasses.replace(cfg, compute_dtype="float32"), batch, real)["reference"]
    # bound: the larger of bf16's tolerance and twice the reference's own bf16 error (against its float32 run)
    floor = gradient_floor(exact[1])
    rows = [compare_to_reference_noise("outputs", outs["pallas"][0], outs["reference"][0], exact[0], jnp.bfloat16)]
    rows += [
        compare_to_reference_noise(f"grad {n}", outs["pallas"][1][n], g, exact[1][n], jnp.bfloat16, floor=floor)
        for n, g in outs["reference"][1].items()
    ]
    failed = [f"{r.name}: {r.rel_l2_err:.2e} > {r.tolerance:.1e}" for r in rows if not r.passed]
    assert not failed, failed


def test_bundled_configs_validate_and_build():
    for name in ("graph-mamba-tiny", "graph-mamba-cluster", "graph-mamba-peptides-func"):
        cfg = load_config(name)
        model = nnx.eval_shape(lambda cfg=cfg: GraphMamba(cfg.model, rngs=nnx.Rngs(0)))
        assert ParamLayout.split(model)[1]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(lap_pe_dim=16), "model.lap_pe_dim"),
        (dict(node_feature_kind="categorical", node_vocab=[]), "model.node_vocab"),
        (dict(task_type="ranking"), "model.task_type"),
        (dict(task_type="multiclass", num_outputs=1), "model.num_outputs"),
        (dict(dropout=1.0), "model.dropout"),
        (dict(task_type="multilabel", class_weighted_loss=True), "model.class_weighted_loss"),
    ],
)
def test_bad_model_fields_are_named(change, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        validate_graph_mamba(small(**change))
