"""MambaVision in Flax: NVlabs' names, shapes, sizes and initialization; its building blocks against float64 NumPy
(batch norm in both modes and its closed-form gradient, the non-causal conv, windows with padding, drop path); the
Pallas scan inside the mixer; remat and bf16. (Whole-model parity with NVlabs' package: tests/compare.)"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compare.parity.tolerances import assert_close
from jax_mamba.configs import load_config
from jax_mamba.configs.schema import MambaVisionConfig
from jax_mamba.models import MambaVision, ParamLayout
from jax_mamba.models.mamba_vision import transformer_block_indices, window_partition, window_reverse
from jax_mamba.modules.layers import add_bias
from jax_mamba.modules.mamba_vision_mixer import MambaVisionMixer, depthwise_conv1d_same
from jax_mamba.modules.vision_layers import BatchNorm, DropPath, batch_norm_train

# Parameter counts of NVlabs' mamba_vision_{T,...}() (mambavision 1.2.0), read off the package's models once;
# published as 31.8M, 35.1M, 50.1M, 97.7M, 227.9M and 241.5M.
PUBLISHED = {
    "T": 31_794_248,
    "T2": 35_104_008,
    "S": 50_140_584,
    "B": 97_685_288,
    "L": 227_961_048,
    "L2": 241_554_824,
}


def tiny(**changes) -> MambaVisionConfig:
    return MambaVisionConfig(**{**vars(load_config("mambavision-tiny").model), "compute_dtype": "float32", **changes})


def split(cfg: MambaVisionConfig, seed: int = 0):
    return ParamLayout.split(MambaVision(cfg, rngs=nnx.Rngs(seed)))


@pytest.mark.parametrize("size", list(PUBLISHED))
def test_published_sizes(size):
    model = nnx.eval_shape(lambda: MambaVision(load_config(f"mambavision-{size}").model, rngs=nnx.Rngs(0)))
    _, params, state = ParamLayout.split(model)
    assert sum(math.prod(v.shape) for v in params.values()) == PUBLISHED[size]
    assert all(k.rsplit(".", 1)[1] in ("running_mean", "running_var", "num_batches_tracked") for k in state)


def test_names_shapes_and_init():
    cfg = tiny(layer_scale=1e-5, layer_scale_conv=0.5)
    _, params, state = split(cfg)
    p = {k: np.asarray(v) for k, v in params.items()}
    mixer = "levels.2.blocks.0.mixer."  # depth 2: block 0 a mixer, block 1 attention; stage-2 width 64
    expected = {
        "patch_embed.conv_down.0.kernel": (3, 3, 3, 8),
        "patch_embed.conv_down.1.weight": (8,),
        "patch_embed.conv_down.3.kernel": (3, 3, 8, 16),
        "levels.0.blocks.0.conv1.kernel": (3, 3, 16, 16),
        "levels.0.blocks.0.conv1.bias": (16,),
        "levels.0.blocks.0.gamma": (16,),
        "levels.0.downsample.reduction.0.kernel": (3, 3, 16, 32),
        mixer + "in_proj.kernel": (64, 64),
        mixer + "x_proj.kernel": (32, 4 + 16),
        mixer + "dt_proj.kernel": (4, 32),
        mixer + "dt_proj.bias": (32,),
        mixer + "A_log": (32, 8),
        mixer + "D": (32,),
        mixer + "conv1d_x.weight": (32, 3),
        mixer + "conv1d_z.weight": (32, 3),
        mixer + "out_proj.kernel": (64, 64),
        "levels.2.blocks.1.mixer.qkv.kernel": (64, 192),
        "levels.2.blocks.1.mixer.qkv.bias": (192,),
        "levels.2.blocks.1.mixer.proj.kernel": (64, 64),
        "levels.2.blocks.1.mlp.fc1.kernel": (64, 256),
        "levels.2.blocks.1.gamma_1": (64,),
        "norm.weight": (128,),
        "head.kernel": (128, 10),
    }
    assert {k: p[k].shape for k in expected} == expected
    assert "levels.3.downsample.reduction.0.kernel" not in p and mixer + "conv1d_x.bias" not in p
    linears = [k for k in p if k.endswith(".kernel") and p[k].ndim == 2]
    kernels = np.concatenate([p[k].ravel() for k in linears])
    assert abs(kernels.std() - 0.02) < 0.002 and np.abs(kernels).max() < 0.2  # trunc_normal(0.02), NVlabs' pass
    for k in linears:  # every Linear bias zero, dt_proj's included (NVlabs' _init_weights)
        if k.replace(".kernel", ".bias") in p:
            np.testing.assert_array_equal(p[k.replace(".kernel", ".bias")], 0.0, err_msg=k)
    np.testing.assert_allclose(p[mixer + "A_log"], np.log(np.tile(np.arange(1, 9), (32, 1))), rtol=1e-6)
    np.testing.assert_array_equal(p[mixer + "D"], 1.0)
    np.testing.assert_allclose(p["levels.2.blocks.1.gamma_1"], 1e-5)
    np.testing.assert_allclose(p["levels.0.blocks.0.gamma"], 0.5)
    conv = p["levels.0.blocks.0.conv1.kernel"]
    assert np.abs(conv).max() <= 1 / math.sqrt(16 * 9)  # torch's default conv init
    assert np.abs(p[mixer + "conv1d_x.weight"]).max() <= 1 / math.sqrt(3)
    s = {k: np.asarray(v) for k, v in state.items()}
    np.testing.assert_array_equal(s["norm.running_var"], 1.0)
    np.testing.assert_array_equal(s["norm.num_batches_tracked"], 0)


def test_every_variable_has_its_own_buffer():
    """The train step donates params and state: two variables sharing one array would be donated twice."""
    _, params, state = split(tiny(layer_scale=1e-5, layer_scale_conv=1e-5))
    values = [*params.values(), *state.values()]
    assert len({id(v) for v in values}) == len(values)


@pytest.mark.parametrize("depth,attention", [(1, []), (2, [1]), (3, [2]), (4, [2, 3]), (5, [3, 4]), (8, [4, 5, 6, 7])])
def test_which_blocks_are_attention(depth, attention):
    assert transformer_block_indices(depth) == attention


@pytest.mark.parametrize("height,width,window", [(6, 9, 3), (4, 4, 4), (8, 6, 2)])
def test_windows_are_raster_ordered_and_invertible(rng, height, width, window):
    x = rng.normal(size=(2, height, width, 5)).astype(np.float32)
    windows = np.asarray(window_partition(jnp.asarray(x), window))
    grid = (2, height // window, width // window)
    assert windows.shape == (math.prod(grid), window * window, 5)
    for index in range(len(windows)):  # windows in raster order, image by image; tokens in raster order inside
        b, r, c = np.unravel_index(index, grid)
        expected = x[b, r * window : (r + 1) * window, c * window : (c + 1) * window].reshape(window * window, 5)
        np.testing.assert_array_equal(windows[index], expected)
    np.testing.assert_array_equal(np.asarray(window_reverse(jnp.asarray(windows), window, height, width)), x)


def test_padding_to_whole_windows_keeps_the_shape(rng):
    """A 7x5 stage-2 map in windows of 3 is padded to 9x6 for the blocks and cropped back."""
    model = MambaVision(tiny(), rngs=nnx.Rngs(1))
    model.eval()
    level = model.levels[2]
    x = jnp.asarray(rng.normal(size=(2, 7, 5, 64)), jnp.float32)
    out = level(x)
    assert out.shape == (2, 4, 3, 128) and bool(jnp.all(jnp.isfinite(out)))


def _batch_norm_numpy(x, weight, bias, eps):
    x = x.astype(np.float64)
    axes = tuple(range(x.ndim - 1))
    mean, var = x.mean(axes), x.var(axes)
    return (x - mean) / np.sqrt(var + eps) * weight + bias, mean, var


@pytest.mark.parametrize("shape", [(3, 5, 4, 6), (7, 2), (1, 2, 1, 3)])
def test_batch_norm_training_and_eval_match_torch_semantics(rng, shape):
    bn = BatchNorm(shape[-1], eps=1e-4, momentum=0.1)
    bn.weight[...] = jnp.asarray(rng.normal(1, 0.3, shape[-1]), jnp.float32)
    bn.bias[...] = jnp.asarray(rng.normal(0, 0.3, shape[-1]), jnp.float32)
    x = rng.normal(2.0, 3.0, size=shape).astype(np.float32)
    expected, mean, var = _batch_norm_numpy(x, np.asarray(bn.weight[...]), np.asarray(bn.bias[...]), 1e-4)
    assert_close("train out", bn(jnp.asarray(x)), expected, jnp.float32)
    n = x.size // shape[-1]
    assert_close("running_mean", bn.running_mean[...], 0.1 * mean, jnp.float32)
    assert_close("running_var", bn.running_var[...], 0.9 + 0.1 * var * n / (n - 1), jnp.float32)  # unbiased
    assert int(bn.num_batches_tracked[...]) == 1
    bn.eval()
    rm, rv = np.asarray(bn.running_mean[...], np.float64), np.asarray(bn.running_var[...], np.float64)
    eval_expected = (x - rm) / np.sqrt(rv + 1e-4) * np.asarray(bn.weight[...]) + np.asarray(bn.bias[...])
    assert_close("eval out", bn(jnp.asarray(x)), eval_expected, jnp.float32)
    assert int(bn.num_batches_tracked[...]) == 1  # eval leaves the statistics alone


def test_batch_norm_closed_form_gradient_matches_autodiff(rng):
    """The custom backward against JAX's autodiff of the plain formula, float64 NumPy-free."""
    x = jnp.asarray(rng.normal(1, 2, size=(4, 3, 5, 6)), jnp.float32)
    w, b = jnp.asarray(rng.normal(1, 0.3, 6), jnp.float32), jnp.asarray(rng.normal(0, 0.3, 6), jnp.float32)
    cot = jnp.asarray(rng.normal(size=x.shape), jnp.float32)

    def plain(x, w, b):
        mean = jnp.mean(x, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b

    def ours(x, w, b):
        bn = BatchNorm(6)
        bn.weight[...], bn.bias[...] = w, b
        return bn(x)

    want = jax.vjp(plain, x, w, b)[1](cot)
    got = jax.vjp(ours, x, w, b)[1](cot)
    for name, g, e in zip(("dx", "dweight", "dbias"), got, want, strict=True):
        assert_close(name, g, e, jnp.float32)


@pytest.mark.parametrize("rows,real", [(37, 29), (8, 1), (64, 64)])
def test_masked_batch_norm_matches_the_real_rows_alone_and_zeroes_the_rest(rng, rows, real):
    """Statistics, output and every gradient from the real rows only, against the unmasked closed form of the real
    rows alone; padding rows hold inf and NaN (selected away, never multiplied by 0), come out as zeros and get
    zero gradient; the running statistics count the real rows."""
    order = rng.permutation(rows)
    mask = np.zeros(rows, np.float32)
    mask[order[:real]] = 1.0
    x = rng.normal(1, 2, size=(rows, 6)).astype(np.float32)
    x[order[real:]] = np.where(rng.random((rows - real, 6)) < 0.5, np.inf, np.nan)
    w, b = jnp.asarray(rng.normal(1, 0.3, 6), jnp.float32), jnp.asarray(rng.normal(0, 0.3, 6), jnp.float32)
    cot = rng.normal(size=x.shape).astype(np.float32)
    keep = mask > 0

    def masked(x, w, b):
        bn = BatchNorm(6)
        bn.weight[...], bn.bias[...] = w, b
        return bn(x, jnp.asarray(mask)), bn.running_var[...]

    (out, running_var), vjp = jax.vjp(masked, jnp.asarray(x), w, b)
    dx, dw, db = vjp((jnp.asarray(cot), jnp.zeros_like(running_var)))
    want, want_vjp = jax.vjp(lambda x, w, b: batch_norm_train(x, w, b, 1e-5)[0], jnp.asarray(x[keep]), w, b)
    want_dx, want_dw, want_db = want_vjp(jnp.asarray(cot[keep]))
    assert_close("real rows out", np.asarray(out)[keep], want, jnp.float32)
    assert np.all(np.asarray(out)[~keep] == 0.0) and np.all(np.asarray(dx)[~keep] == 0.0)
    assert_close("dx real rows", np.asarray(dx)[keep], want_dx, jnp.float32)
    assert_close("dweight", dw, want_dw, jnp.float32)
    assert_close("dbias", db, want_db, jnp.float32)
    if real > 1:
        want_var = np.var(x[keep].astype(np.float64), axis=0) * real / (real - 1)
        assert_close("running_var", running_var, 0.9 + 0.1 * want_var, jnp.float32)


def test_batch_norm_refuses_one_value_per_channel():
    with pytest.raises(ValueError, match="more than one value per channel"):
        BatchNorm(3)(jnp.ones((1, 1, 1, 3)))


def test_add_bias_gradient_sums_in_float32(rng):
    y = jnp.asarray(rng.normal(size=(64, 64, 32, 4)), jnp.bfloat16)
    _, vjp = jax.vjp(add_bias, y, jnp.zeros(4, jnp.float32))
    dy, dbias = vjp(y)
    expected = np.asarray(y, np.float64).sum(axis=(0, 1, 2))
    assert dbias.dtype == jnp.float32 and dy.dtype == jnp.bfloat16
    assert_close("dbias", dbias, expected, jnp.float32)


@pytest.mark.parametrize("length,width", [(1, 3), (7, 3), (16, 4), (5, 1)])
def test_depthwise_conv1d_same_matches_torch_padding(rng, length, width):
    x = rng.normal(size=(2, length, 5)).astype(np.float32)
    w = rng.normal(size=(5, width)).astype(np.float32)
    left = (width - 1) // 2  # torch's padding='same': the extra zero goes right for even widths
    padded = np.pad(x.astype(np.float64), ((0, 0), (left, width - 1 - left), (0, 0)))
    expected = sum(padded[:, k : k + length] * w[:, k] for k in range(width))
    assert_close("conv", depthwise_conv1d_same(jnp.asarray(x), jnp.asarray(w)), expected, jnp.float32)


def test_drop_path_drops_whole_samples_in_training_only(rng):
    x = jnp.ones((400, 3, 2), jnp.float32)
    dp = DropPath(0.25)
    out = np.asarray(dp(x, nnx.Rngs(dropout=int(rng.integers(1 << 30)))))
    per_sample = out.reshape(400, -1)
    assert set(np.unique(per_sample.std(axis=1))) == {0.0}  # a sample is kept or dropped as a whole
    kept = per_sample[:, 0] > 0
    np.testing.assert_allclose(per_sample[kept], 1 / 0.75, rtol=1e-6)
    assert 0.6 < kept.mean() < 0.9
    with pytest.raises(ValueError, match="needs rngs"):
        dp(x)
    dp.eval()
    np.testing.assert_array_equal(np.asarray(dp(x)), np.asarray(x))


def test_mixer_pallas_scan_matches_reference(rng):
    """The mixer with the Pallas selective scan (interpreted on CPU) against the pure-JAX scan: output and every
    parameter gradient, at a window of 9 tokens (not a multiple of the scan's chunk)."""
    x = jnp.asarray(rng.normal(size=(3, 9, 24)), jnp.float32)

    def run(impl):
        mixer = MambaVisionMixer(24, d_state=8, d_conv=3, expand=1, impl=impl, rngs=nnx.Rngs(3))
        layout, params, _ = ParamLayout.split(mixer)
        return jax.jit(jax.value_and_grad(lambda p: jnp.sum(layout.merge(p)(x) ** 2)))(params)

    (l_ref, g_ref), (l_pallas, g_pallas) = run("reference"), run("pallas")
    assert_close("loss", l_pallas, l_ref, jnp.float32)
    for k in g_ref:
        assert_close(k, g_pallas[k], g_ref[k], jnp.float32)


def test_remat_gives_the_same_loss_and_gradients(rng):
    images = jnp.asarray(rng.normal(size=(2, 32, 32, 3)), jnp.float32)

    def loss_and_grads(remat):
        layout, params, state = split(tiny(remat=remat, drop_path_rate=0.0), seed=4)
        # Eager, op by op: both run the same float32 operations and agree to rounding. Compiled, the two programs
        # round apart, and a gradient that is zero in exact arithmetic (a bias before a BatchNorm) missed float32's
        # tolerance relative to GRAD_FLOOR x the whole gradient's norm (3.9e-3 against 1e-4, one CI run).
        return jax.value_and_grad(lambda p: jnp.mean(layout.merge(p, state)(images) ** 2))(params)

    (l0, g0), (l1, g1) = loss_and_grads(False), loss_and_grads(True)
    np.testing.assert_allclose(float(l0), float(l1), rtol=1e-6)
    for k in g0:
        np.testing.assert_allclose(np.asarray(g0[k]), np.asarray(g1[k]), rtol=1e-5, atol=1e-7, err_msg=k)


def test_bf16_compute_keeps_parameters_and_statistics_float32(rng):
    layout, params, state = split(tiny(compute_dtype="bfloat16"))
    model = layout.merge(params, state)
    logits = model(jnp.asarray(rng.normal(size=(2, 40, 40, 3)), jnp.float32), nnx.Rngs(dropout=0))
    assert logits.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(logits)))
    assert all(v.dtype == jnp.float32 for v in params.values())
    assert all(v.dtype == jnp.float32 for k, v in layout.state_of(model).items() if "running" in k)
