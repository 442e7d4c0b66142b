"""Flax mixers and blocks: mamba-ssm's parameter names/shapes/initialization, forward math against float64 NumPy
re-derivations of mamba-ssm's slow paths, causality, packed sequences and mixed precision."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compare.parity.tolerances import assert_close
from jax_mamba.configs.schema import AttnConfig, ModelConfig, SSMConfig
from jax_mamba.models import MambaLMHeadModel, ParamLayout
from jax_mamba.modules.layers import embedding
from jax_mamba.modules.mamba2 import Mamba2
from jax_mamba.modules.mamba_simple import Mamba
from jax_mamba.modules.mha import MHA
from tests.jax_mamba import naive_mixers


def params64(module) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, np.float64) for k, v in ParamLayout.split(module)[1].items()}


def run(module: nnx.Module, *args):
    """``module(*args)`` compiled as one program: run eagerly, each of its operations compiles on its own (most of a
    test's time on a 2-core CPU)."""
    return nnx.jit(lambda m, *a: m(*a))(module, *args)


def perturb(module, rng, scale=0.3):
    """Random values on every parameter (so zero-initialized biases and ones-initialized D/norms are exercised)."""
    layout, params, _ = ParamLayout.split(module)
    noisy = {k: v + jnp.asarray(rng.normal(0, scale, v.shape), v.dtype) for k, v in params.items()}
    return layout.merge(noisy)


def test_mamba1_names_shapes_and_init():
    m = Mamba(32, d_state=8, rngs=nnx.Rngs(0))  # d_inner 64, dt_rank 2
    p = params64(m)
    expected = {
        "in_proj.kernel": (32, 128),
        "conv1d.weight": (64, 4),
        "conv1d.bias": (64,),
        "x_proj.kernel": (64, 18),
        "dt_proj.kernel": (2, 64),
        "dt_proj.bias": (64,),
        "A_log": (64, 8),
        "D": (64,),
        "out_proj.kernel": (64, 32),
    }
    assert {k: v.shape for k, v in p.items()} == expected
    np.testing.assert_allclose(p["A_log"], np.log(np.tile(np.arange(1, 9), (64, 1))), rtol=1e-6)
    np.testing.assert_array_equal(p["D"], 1.0)
    dt = np.logaddexp(p["dt_proj.bias"], 0.0)
    assert dt.min() >= 1e-3 * 0.999 and dt.max() <= 0.1 * 1.001
    assert np.abs(p["dt_proj.kernel"]).max() <= 2**-0.5
    assert np.abs(p["in_proj.kernel"]).max() <= 1 / math.sqrt(32)
    assert np.abs(p["conv1d.weight"]).max() <= 0.5 and np.abs(p["conv1d.bias"]).max() <= 0.5


def test_mamba2_names_shapes_and_init():
    m = Mamba2(32, d_state=8, headdim=16, ngroups=2, rngs=nnx.Rngs(0))  # d_inner 64, 4 heads
    p = params64(m)
    expected = {
        "in_proj.kernel": (32, 2 * 64 + 2 * 2 * 8 + 4),
        "conv1d.weight": (64 + 32, 4),
        "conv1d.bias": (96,),
        "dt_bias": (4,),
        "A_log": (4,),
        "D": (4,),
        "norm.weight": (64,),
        "out_proj.kernel": (64, 32),
    }
    assert {k: v.shape for k, v in p.items()} == expected
    A = np.exp(p["A_log"])
    assert A.min() >= 1.0 and A.max() <= 16.0
    dt = np.logaddexp(p["dt_bias"], 0.0)
    assert dt.min() >= 1e-3 * 0.999 and dt.max() <= 0.1 * 1.001
    np.testing.assert_array_equal(p["norm.weight"], 1.0)


@pytest.mark.parametrize("d_model,d_state,dt_rank,bias", [(16, 4, "auto", False), (24, 8, 5, True)])
def test_mamba1_forward_matches_numpy_slow_path(rng, d_model, d_state, dt_rank, bias):
    m = perturb(Mamba(d_model, d_state=d_state, dt_rank=dt_rank, bias=bias, rngs=nnx.Rngs(1)), rng)
    x = rng.normal(size=(2, 13, d_model))
    out = run(m, jnp.asarray(x, jnp.float32))
    want = naive_mixers.mamba1(params64(m), x, d_state, m.dt_rank)
    assert_close("Mamba output", out, want, jnp.float32)


def test_mamba1_pallas_impl_matches_slow_path_and_reference_gradients(rng):
    """``impl="pallas"`` puts the selective scan on the Pallas kernel (interpreted here); the conv stays reference."""
    m = perturb(Mamba(16, d_state=4, impl="pallas", rngs=nnx.Rngs(2)), rng)
    x = jnp.asarray(rng.normal(size=(2, 21, 16)), jnp.float32)
    assert_close("Mamba output", run(m, x), naive_mixers.mamba1(params64(m), np.asarray(x), 4, m.dt_rank), jnp.float32)

    want, got = parameter_grads(m, x, "reference"), parameter_grads(m, x, "pallas")
    for name, value in want.items():
        assert_close(f"d{name}", got[name], value, jnp.float32)


def parameter_grads(mixer: nnx.Module, x: jax.Array, impl: str) -> dict:
    """{parameter name: gradient} of sum(mixer(x)²) with the mixer's ops on ``impl``, compiled as one program."""
    mixer.impl = impl
    layout, params, _ = ParamLayout.split(mixer)
    return jax.jit(jax.grad(lambda p: jnp.sum(layout.merge(p)(x) ** 2)))(params)


def test_mamba2_pallas_impl_matches_reference_outputs_and_gradients(rng):
    """``impl="pallas"`` puts the SSD on the Pallas kernels (interpreted here): same output and parameter gradients
    as the reference, with groups and a sequence that is not a multiple of the kernels' block."""
    m = perturb(Mamba2(32, d_state=16, headdim=16, ngroups=2, chunk_size=16, impl="pallas", rngs=nnx.Rngs(3)), rng)
    x = jnp.asarray(rng.normal(size=(2, 37, 32)), jnp.float32)

    m.impl = "pallas"
    out = run(m, x)
    m.impl = "reference"
    assert_close("Mamba2 output", out, run(m, x), jnp.float32)
    want, got = parameter_grads(m, x, "reference"), parameter_grads(m, x, "pallas")
    for name, value in want.items():
        assert_close(f"d{name}", got[name], value, jnp.float32)


def test_model_impl_picks_pallas_where_an_op_has_it(monkeypatch):
    from jax_mamba.modules.impl import op_impl
    from pallas_kernels import causal_conv1d_fn, mamba_chunk_scan_combined, rmsnorm_fn, selective_scan_fn
    from pallas_kernels.rmsnorm_gated import api as rmsnorm_api

    assert op_impl("pallas", selective_scan_fn) == "pallas"
    assert op_impl("pallas", mamba_chunk_scan_combined) == "pallas"
    assert op_impl("pallas", causal_conv1d_fn) == "pallas"
    assert op_impl("pallas", rmsnorm_fn) == "pallas"
    assert op_impl("reference", selective_scan_fn) == "reference"
    expected_auto = "pallas" if jax.default_backend() == "gpu" else "reference"
    assert op_impl("auto", selective_scan_fn) == expected_auto
    with pytest.raises(ValueError, match="impl must be one of"):
        op_impl("cuda", selective_scan_fn)
    # mamba-ssm's SSD kernels from JAX swap that one op; the others run as under "pallas"
    assert op_impl("mamba_ssm_triton", mamba_chunk_scan_combined) == "mamba_ssm_triton"
    assert op_impl("mamba_ssm_triton", selective_scan_fn) == "pallas"
    assert op_impl("mamba_ssm_triton", causal_conv1d_fn) == "pallas"
    assert op_impl("mamba_ssm_triton", rmsnorm_fn) == "pallas"
    monkeypatch.setattr(rmsnorm_api, "_AVAILABLE_IMPLS", ("reference",))  # an op without a Pallas kernel
    assert op_impl("pallas", rmsnorm_fn) == "reference"


def test_model_impl_mamba_ssm_triton_without_its_registration_says_what_to_import(monkeypatch):
    """A Mamba-2 layer asked for mamba-ssm's kernels in a process that never registered them stops with the
    import it needs instead of silently running other kernels."""
    from flax import nnx

    from jax_mamba.modules.mamba2 import Mamba2
    from pallas_kernels.ssd import api

    monkeypatch.setattr(api, "_REGISTERED", {})
    layer = Mamba2(d_model=32, d_state=16, headdim=8, chunk_size=8, impl="mamba_ssm_triton", rngs=nnx.Rngs(0))
    with pytest.raises(NotImplementedError, match=r"import torch_reference\.ssd_jax_triton"):
        layer(jnp.zeros((1, 8, 32), jnp.float32))


def test_attention_uses_cudnn_only_on_a_gpu_for_half_precision():
    from jax_mamba.modules.impl import attention_impl

    on_gpu = jax.default_backend() == "gpu"
    assert attention_impl("auto", jnp.bfloat16, 40) == ("cudnn" if on_gpu else "xla")
    assert attention_impl("pallas", jnp.float16, 64) == ("cudnn" if on_gpu else "xla")
    assert attention_impl("auto", jnp.float32, 64) == "xla"
    assert attention_impl("auto", jnp.bfloat16, 49) == "xla"  # cuDNN wants head_dim % 8 == 0
    assert attention_impl("reference", jnp.bfloat16, 64) == "xla"
    with pytest.raises(ValueError, match="impl must be one of"):
        attention_impl("cuda", jnp.bfloat16, 64)


@pytest.mark.parametrize(
    "kw",
    [
        dict(d_state=8, headdim=8, ngroups=1, chunk_size=8),
        dict(d_state=4, headdim=8, ngroups=2, chunk_size=4, D_has_hdim=True, norm_before_gate=True, bias=True),
        dict(d_state=8, headdim=8, ngroups=2, chunk_size=16, d_ssm=32, dt_limit=(0.01, 0.5)),
    ],
)
def test_mamba2_forward_matches_numpy_slow_path(rng, kw):
    m = perturb(Mamba2(24, rngs=nnx.Rngs(2), **kw), rng)
    x = rng.normal(size=(2, 19, 24))
    out = run(m, jnp.asarray(x, jnp.float32))
    want = naive_mixers.mamba2(
        params64(m),
        x,
        d_state=kw["d_state"],
        headdim=kw["headdim"],
        ngroups=kw["ngroups"],
        d_ssm=m.d_ssm,
        norm_before_gate=kw.get("norm_before_gate", False),
        dt_limit=kw.get("dt_limit", (0.0, np.inf)),
    )
    assert_close("Mamba2 output", out, want, jnp.float32)


def test_mha_gqa_rotary_matches_numpy(rng):
    """Causal GQA attention with rotary, written out in NumPy (kv head j serves q heads 2j, 2j + 1)."""
    m = perturb(MHA(16, num_heads=4, num_heads_kv=2, rotary_emb_dim=4, rngs=nnx.Rngs(3)), rng)
    x = rng.normal(size=(1, 7, 16))
    out = run(m, jnp.asarray(x, jnp.float32))
    p = params64(m)
    qkv = x @ p["in_proj.kernel"] + p["in_proj.bias"]
    q = qkv[..., :16].reshape(1, 7, 4, 4)
    k, v = qkv[..., 16:24].reshape(1, 7, 2, 4), qkv[..., 24:].reshape(1, 7, 2, 4)
    pos = np.arange(7)[:, None] * (1.0 / 10000 ** (np.arange(0, 4, 2) / 4))

    def rope(t):
        x1, x2 = t[..., :2], t[..., 2:4]
        c, s = np.cos(pos)[None, :, None], np.sin(pos)[None, :, None]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

    q, k = rope(q), rope(k)
    k, v = np.repeat(k, 2, axis=2), np.repeat(v, 2, axis=2)
    scores = np.einsum("bthd,bshd->bhts", q, k) / 2.0
    scores = np.where(np.tril(np.ones((7, 7), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bhts,bshd->bthd", weights, v).reshape(1, 7, 16)
    assert_close("MHA output", out, context @ p["out_proj.kernel"] + p["out_proj.bias"], jnp.float32)


def tiny_model_config(layer: str, **model_kw) -> ModelConfig:
    ssm = SSMConfig(layer=layer, d_state=8, headdim=8, chunk_size=8)
    return ModelConfig(**({"d_model": 32, "n_layer": 3, "vocab_size": 50, "ssm_cfg": ssm} | model_kw))


HYBRID = dict(attn_layer_idx=[1], attn_cfg=AttnConfig(num_heads=4, rotary_emb_dim=8), d_intermediate=40)


@pytest.mark.parametrize("layer,extra", [("Mamba1", {}), ("Mamba2", {}), ("Mamba2", HYBRID)])
def test_lm_is_causal(rng, layer, extra):
    model = perturb(MambaLMHeadModel(tiny_model_config(layer, **extra), rngs=nnx.Rngs(4)), rng, 0.05)
    ids = rng.integers(0, 50, size=(2, 21))
    changed = ids.copy()
    changed[:, 12:] = rng.integers(0, 50, size=(2, 9))
    a, b = run(model, jnp.asarray(ids)), run(model, jnp.asarray(changed))
    np.testing.assert_array_equal(np.asarray(a[:, :12]), np.asarray(b[:, :12]))
    assert not np.allclose(np.asarray(a[:, 12:]), np.asarray(b[:, 12:]))


@pytest.mark.parametrize(
    "layer,extra", [("Mamba2", {}), ("Mamba2", HYBRID), ("Mamba1", {})], ids=["mamba2", "hybrid", "mamba1"]
)
def test_packed_sequences_equal_separate_runs(rng, layer, extra):
    """seq_idx through conv, SSD or scan, and attention: packing is exactly running each sequence alone (the
    kernels' own packed-sequence tests: tests/pallas_kernels)."""
    model = perturb(MambaLMHeadModel(tiny_model_config(layer, **extra), rngs=nnx.Rngs(5)), rng, 0.05)
    lengths = [9, 4, 12]
    ids = rng.integers(0, 50, size=(1, sum(lengths)))
    seq_idx = jnp.asarray(np.repeat(np.arange(3), lengths)[None], jnp.int32)
    forward = nnx.jit(lambda model, ids, seq_idx=None: model(ids, seq_idx))  # one program per length, not per op
    packed = forward(model, jnp.asarray(ids), seq_idx)
    start = 0
    for length in lengths:
        alone = forward(model, jnp.asarray(ids[:, start : start + length]))
        assert_close("packed segment", packed[:, start : start + length], alone, jnp.float32)
        start += length


def test_mamba3_refuses_seq_idx():
    model = MambaLMHeadModel(tiny_model_config("Mamba3"), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="seq_idx"):
        model(jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 4), jnp.int32))


def test_lm_head_tied_padded_and_rescaled():
    cfg = tiny_model_config("Mamba2", pad_vocab_size_multiple=16)
    model = MambaLMHeadModel(cfg, rngs=nnx.Rngs(6))
    p = params64(model)
    assert p["backbone.embedding.embedding"].shape == (64, 32)  # 50 padded to a multiple of 16
    assert not any(k.startswith("lm_head") for k in p)
    assert abs(p["backbone.embedding.embedding"].std() - 0.02) < 0.004
    bound = 1 / math.sqrt(64) / math.sqrt(cfg.n_layer)  # out_proj: torch init / sqrt(n_layer)
    for i in range(cfg.n_layer):
        kernel = p[f"backbone.layers.{i}.mixer.out_proj.kernel"]
        assert np.abs(kernel).max() <= bound and np.abs(kernel).max() > 0.8 * bound
    ids = jnp.asarray([[1, 2, 3]])
    hidden, logits = run(model.backbone, ids), run(model, ids)
    tied = hidden @ model.backbone.embedding.embedding[...].T
    np.testing.assert_allclose(np.asarray(logits), np.asarray(tied), rtol=1e-5, atol=1e-6)
    untied = MambaLMHeadModel(tiny_model_config("Mamba2", tie_embeddings=False), rngs=nnx.Rngs(6))
    assert params64(untied)["lm_head.kernel"].shape == (32, 56)


def test_bf16_compute_keeps_fp32_params_and_residual(rng):
    model = MambaLMHeadModel(tiny_model_config("Mamba2", compute_dtype="bfloat16"), rngs=nnx.Rngs(7))
    assert all(v.dtype == jnp.float32 for v in ParamLayout.split(model)[1].values())
    ids = jnp.asarray(rng.integers(0, 50, size=(2, 10)))
    hidden = model.backbone.embedding(ids)
    out, residual = run(model.backbone.layers[0], hidden)
    assert out.dtype == jnp.bfloat16 and residual.dtype == jnp.float32
    logits = run(model, ids)
    assert logits.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(logits.astype(jnp.float32))))
    ref = run(MambaLMHeadModel(tiny_model_config("Mamba2", compute_dtype="float32"), rngs=nnx.Rngs(7)), ids)
    assert_close("bf16 vs fp32 logits", logits, ref, jnp.bfloat16, scale=2.0)  # bf16 rounding in every matmul


def test_remat_gives_same_loss_and_gradients(rng):
    ids = jnp.asarray(rng.integers(0, 50, size=(2, 12)))

    def loss_and_grads(remat):
        layout, params, _ = ParamLayout.split(
            MambaLMHeadModel(tiny_model_config("Mamba2", remat=remat, **HYBRID), rngs=nnx.Rngs(8))
        )
        return jax.jit(jax.value_and_grad(lambda p: jnp.mean(layout.merge(p)(ids) ** 2)))(params)

    (l0, g0), (l1, g1) = loss_and_grads(False), loss_and_grads(True)
    np.testing.assert_allclose(float(l0), float(l1), rtol=1e-6)
    for k in g0:
        assert_close(f"d{k}", g1[k], g0[k], jnp.float32)


def test_ssm_cfg_fields_reach_the_mixers():
    """Non-default ssm_cfg values show up in the built mixers' parameter shapes and settings."""
    m1 = tiny_model_config("Mamba1")
    m1.ssm_cfg.d_state, m1.ssm_cfg.d_conv, m1.ssm_cfg.expand, m1.ssm_cfg.dt_rank = 4, 2, 3, 3
    p = params64(MambaLMHeadModel(m1, rngs=nnx.Rngs(0)))
    assert p["backbone.layers.0.mixer.A_log"].shape == (96, 4)
    assert p["backbone.layers.0.mixer.conv1d.weight"].shape == (96, 2)
    assert p["backbone.layers.0.mixer.dt_proj.kernel"].shape == (3, 96)
    m1.scan_checkpoint_every, m1.scan_backend = 0, "mosaic_gpu"
    mixer = MambaLMHeadModel(m1, rngs=nnx.Rngs(0)).backbone.layers[0].mixer
    assert (mixer.scan_checkpoint_every, mixer.scan_backend) == (0, "mosaic_gpu")
    m2 = tiny_model_config("Mamba2")
    s = m2.ssm_cfg
    s.d_state, s.d_conv, s.expand, s.ngroups, s.D_has_hdim, s.chunk_size, s.dt_limit = 6, 3, 3, 2, True, 4, (0.0, 0.2)
    model = MambaLMHeadModel(m2, rngs=nnx.Rngs(0))
    p = params64(model)
    assert p["backbone.layers.0.mixer.conv1d.weight"].shape == (96 + 2 * 2 * 6, 3)
    assert p["backbone.layers.0.mixer.D"].shape == (96,)
    mixer = model.backbone.layers[0].mixer
    assert (mixer.chunk_size, mixer.dt_limit, mixer.ngroups, mixer.headdim) == (4, (0.0, 0.2), 2, 8)
    assert mixer.ssd_checkpoint_every is None
    m2.ssd_checkpoint_every = 128
    assert MambaLMHeadModel(m2, rngs=nnx.Rngs(0)).backbone.layers[0].mixer.ssd_checkpoint_every == 128


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_embedding_rounds_only_the_looked_up_rows_and_sums_gradients_in_float32(rng, dtype):
    """Rows of the float32 table cast to the compute dtype; the table's gradient is float32 and sums repeated ids
    exactly (a bfloat16 scatter would round each partial sum), against a one-hot float64 NumPy reference."""
    vocab, dim = 11, 6
    emb = embedding(vocab, dim, std=1.0, dtype=dtype, rngs=nnx.Rngs(int(rng.integers(1 << 30))))
    ids = rng.integers(0, vocab, size=(3, 37)).astype(np.int32)
    cot = rng.normal(size=(3, 37, dim)).astype(np.float32)
    layout, params, _ = ParamLayout.split(emb)
    table = np.asarray(params["embedding"])
    out, vjp = jax.vjp(lambda p: layout.merge(p)(jnp.asarray(ids)), params)
    assert out.dtype == dtype
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jnp.asarray(table[ids]).astype(dtype)))
    grad = vjp(jnp.asarray(cot).astype(dtype))[0]["embedding"]
    one_hot = np.eye(vocab)[ids.reshape(-1)]
    want = one_hot.T @ np.asarray(jnp.asarray(cot).astype(dtype), np.float64).reshape(-1, dim)
    assert grad.dtype == jnp.float32
    assert_close("embedding grad", grad, want, jnp.float32)
    with pytest.raises(ValueError, match="input ids must be integers"):
        emb(jnp.zeros((2,), jnp.float32))


def test_norm_and_conv_keep_only_their_inputs_for_the_backward():
    """RMSNorm and the causal conv are rematerialized: their vjp keeps the input and the parameters (closed over, so
    counted), nothing computed from them."""
    from compare.kernels.ops import saved_beyond_inputs
    from jax_mamba.modules.layers import CausalConv1d, RMSNorm

    x = jnp.ones((2, 16, 8), jnp.bfloat16)
    norm = RMSNorm(8)
    conv = CausalConv1d(8, 4, bias=True, rngs=nnx.Rngs(0))
    assert saved_beyond_inputs(norm, [x]) == 8 * 4  # the float32 weight
    assert saved_beyond_inputs(lambda h: conv(h, activation="silu"), [x]) == (8 * 4 + 8) * 4  # weight and bias
    assert saved_beyond_inputs(lambda h: jax.nn.silu(h.astype(jnp.float32)), [x]) > 0  # the measure can see a residual


def test_mamba1_backward_recomputes_the_conv_and_delta_and_keeps_the_scan_states():
    """As mamba-ssm's mamba_inner_fn: of the (batch, L, d_inner) activations only in_proj's two halves are kept
    for the backward (not the conv's output or delta, which it recomputes), and the Pallas scan's states are kept
    (so the scan itself is not rerun)."""
    mixer = Mamba(16, d_state=4, rngs=nnx.Rngs(0), impl="pallas", dtype=jnp.bfloat16)  # d_inner 32
    h = jnp.ones((2, 24, 16), jnp.bfloat16)
    closed = jax.make_jaxpr(lambda x: jax.vjp(mixer, x)[1])(h)
    inputs = set(map(id, closed.jaxpr.invars))
    kept = [v.aval for v in closed.jaxpr.outvars if id(v) not in inputs and hasattr(v, "aval")]
    activations = [a for a in kept if a.shape == (2, 24, 32)]
    assert len(activations) <= 2 and all(a.dtype == jnp.bfloat16 for a in activations), kept
    assert any(a.dtype == jnp.float32 and a.ndim == 4 and a.shape[0] == 2 for a in kept), kept  # the states


def test_mamba2_backward_keeps_in_proj_and_ssd_outputs_and_the_ssd_states_only():
    """As mamba-ssm's fused Mamba-2 layer: of the (batch, L, channels) activations only in_proj's output (its blocks
    z, x, BC, dt, separate arrays) and the SSD's output are kept for the backward (not the conv's output, the gated
    norm's float32 intermediates or out_proj's input, which it recomputes), and the Pallas SSD's states are kept (so
    its forward is not rerun)."""
    mixer = Mamba2(16, d_state=4, headdim=8, chunk_size=8, rngs=nnx.Rngs(0), impl="pallas", dtype=jnp.bfloat16)
    h = jnp.ones((2, 24, 16), jnp.bfloat16)
    closed = jax.make_jaxpr(lambda x: jax.vjp(mixer, x)[1])(h)
    inputs = set(map(id, closed.jaxpr.invars))
    kept = [v.aval for v in closed.jaxpr.outvars if id(v) not in inputs and hasattr(v, "aval")]
    activations = sorted(a.shape[-1] for a in kept if a.shape[:2] == (2, 24))
    assert activations == [4, 8, 32, 32, 32], kept  # dt (H), BC (2 G N), z and x (d_ssm), the SSD's output
    assert all(a.dtype == jnp.bfloat16 for a in kept if a.shape[:2] == (2, 24)), kept
    assert any(a.ndim == 5 and a.shape[0] == 2 and a.shape[2:] == (4, 8, 4) for a in kept), kept  # the states


@pytest.mark.parametrize("impl", ["pallas", "reference"])
def test_mamba2_without_mixer_remat_keeps_no_float32_activations(impl):
    """``mixer_remat=False`` (or the reference SSD) keeps the conv's output and the norm's inputs, but in the compute
    dtype: the gated norm is rematerialized, so none of its float32 intermediates are kept."""
    kw = dict(d_state=4, headdim=8, chunk_size=8, rngs=nnx.Rngs(0), impl=impl, dtype=jnp.bfloat16, mixer_remat=False)
    mixer = Mamba2(16, **kw)
    h = jnp.ones((2, 24, 16), jnp.bfloat16)
    closed = jax.make_jaxpr(lambda x: jax.vjp(mixer, x)[1])(h)
    kept = [v.aval for v in closed.jaxpr.outvars if hasattr(v, "aval") and v.aval.shape[:2] == (2, 24)]
    assert any(a.shape == (2, 24, 8) for a in kept), kept  # the BC conv's input: the remat region is off
    wide = [a for a in kept if a.shape[-1] >= 32 and a.dtype == jnp.float32]
    assert not wide, kept
