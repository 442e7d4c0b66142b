"""The Mamba-3 mixer: mamba-ssm's parameter names, shapes and initialization, and its forward against a float64
NumPy re-derivation of mamba-ssm's ``Mamba3.forward`` (split order, A and dt, B/C norms and biases, the gate or the
gated output norm) on top of the Mamba-3 oracle."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compare.parity.tolerances import assert_close
from jax_mamba.configs.schema import MAMBA3_A_ACTIVATIONS
from jax_mamba.models import ParamLayout
from jax_mamba.modules.mamba3 import Mamba3, heavy_tail
from tests.jax_mamba import naive_mixers
from tests.jax_mamba.test_modules import params64, perturb, run


def test_names_shapes_and_init():
    m = Mamba3(32, d_state=16, headdim=8, ngroups=2, rngs=nnx.Rngs(0))  # d_inner 64, 8 heads, 4 rotary angles
    p = {k: np.asarray(v) for k, v in ParamLayout.split(m)[1].items()}
    shapes = {k: v.shape for k, v in p.items()}
    assert shapes == {
        "in_proj.kernel": (32, 2 * 64 + 2 * 2 * 16 + 3 * 8 + 4),
        "dt_bias": (8,),
        "B_bias": (8, 1, 16),
        "C_bias": (8, 1, 16),
        "B_norm.weight": (16,),
        "C_norm.weight": (16,),
        "D": (8,),
        "out_proj.kernel": (64, 32),
    }
    dt = np.logaddexp(p["dt_bias"], 0.0)
    assert dt.min() >= 1e-3 * 0.999 and dt.max() <= 0.1 * 1.001
    for name in ("B_bias", "C_bias", "B_norm.weight", "C_norm.weight", "D"):
        np.testing.assert_array_equal(p[name], 1.0)
    with_norm = Mamba3(32, d_state=16, headdim=8, rope_fraction=1.0, is_outproj_norm=True, rngs=nnx.Rngs(0))
    assert with_norm.norm.weight.shape == (64,) and with_norm.num_rope_angles == 8


@pytest.mark.parametrize(
    "d_model,d_state,headdim,ngroups,rope_fraction,outproj_norm,chunk,activation",
    [(16, 8, 4, 1, 0.5, False, 4, "softplus"), (12, 6, 6, 2, 1.0, True, 5, "heavy_tail")],
)
def test_forward_matches_numpy_slow_path(
    rng, d_model, d_state, headdim, ngroups, rope_fraction, outproj_norm, chunk, activation
):
    kw = dict(d_state=d_state, headdim=headdim, ngroups=ngroups, rope_fraction=rope_fraction, chunk_size=chunk)
    m = Mamba3(d_model, **kw, is_outproj_norm=outproj_norm, A_activation=activation, rngs=nnx.Rngs(1))
    m = perturb(m, rng)
    x = rng.normal(size=(2, 11, d_model))
    want = naive_mixers.mamba3(
        params64(m),
        x,
        d_state=d_state,
        headdim=headdim,
        ngroups=ngroups,
        angles=m.num_rope_angles,
        activation=activation,
    )
    assert_close("Mamba3 output", run(m, jnp.asarray(x, jnp.float32)), want, jnp.float32)


@pytest.mark.parametrize(
    "rope_fraction,outproj_norm,chunk,activation", [(0.5, False, 4, "heavy_tail"), (1.0, True, 3, "softplus")]
)
def test_mimo_names_shapes_and_forward_match_numpy_slow_path(rng, rope_fraction, outproj_norm, chunk, activation):
    """is_mimo: B_bias and C_bias per rank, mimo_x / mimo_z / mimo_o (H, R, P) at 1/R, 1 and 1/R, in_proj's B and C
    R times wider; the forward against mamba-ssm's MIMO forward re-derived in NumPy on the MIMO oracle."""
    kw = dict(d_state=8, headdim=4, ngroups=1, rope_fraction=rope_fraction, chunk_size=chunk, mimo_rank=2)
    m = Mamba3(16, **kw, is_mimo=True, is_outproj_norm=outproj_norm, A_activation=activation, rngs=nnx.Rngs(1))
    p = {k: np.asarray(v) for k, v in ParamLayout.split(m)[1].items()}
    assert p["in_proj.kernel"].shape == (16, 2 * 32 + 2 * 2 * 8 + 3 * 8 + m.num_rope_angles)
    assert p["B_bias"].shape == p["C_bias"].shape == (8, 2, 8)
    for name, value in (("mimo_x", 0.5), ("mimo_z", 1.0), ("mimo_o", 0.5)):
        assert p[name].shape == (8, 2, 4)
        np.testing.assert_array_equal(p[name], value)
    m = perturb(m, rng)
    x = rng.normal(size=(2, 7, 16))
    angles = m.num_rope_angles
    want = naive_mixers.mamba3_mimo(
        params64(m), x, d_state=8, headdim=4, ngroups=1, rank=2, angles=angles, activation=activation
    )
    assert_close("Mamba3 MIMO output", run(m, jnp.asarray(x, jnp.float32)), want, jnp.float32)


@pytest.mark.parametrize("activation", MAMBA3_A_ACTIVATIONS)
def test_mimo_prefill_continued_by_steps_is_the_whole_forward(rng, activation):
    kw = dict(d_state=8, headdim=4, chunk_size=4, is_mimo=True, mimo_rank=2, A_activation=activation)
    m = perturb(Mamba3(16, **kw, rngs=nnx.Rngs(2)), rng)
    x = jnp.asarray(rng.normal(size=(2, 9, 16)), jnp.float32)
    whole = m(x)
    out, cache = m.prefill(x[:, :5], max_len=9)
    assert cache["k"].shape == (2, 2, 8, 8)
    outs = [out]
    for t in range(5, 9):
        y, cache = m.step(x[:, t : t + 1], cache, jnp.asarray(t))
        outs.append(y)
    assert_close("prefill + steps", jnp.concatenate(outs, axis=1), whole, jnp.float32)


def test_heavy_tail_values_and_slope():
    """1 + x from 0 up, 1 / (1 - x) below, slope 1 on both sides of 0; positive and finite with finite slopes far
    out on either side (where softplus underflows to 0 far below)."""
    x = np.array([-1e15, -1e4, -3.0, -0.5, 0.0, 0.5, 3.0, 1e4], np.float32)
    got = np.asarray(heavy_tail(jnp.asarray(x)))
    np.testing.assert_allclose(got, np.where(x >= 0, 1 + x, 1 / (1 - x)), rtol=1e-6)
    assert (got > 0).all()
    slope = np.asarray(jax.vmap(jax.grad(heavy_tail))(jnp.asarray(x)))
    np.testing.assert_allclose(slope, np.where(x >= 0, 1.0, 1 / (1 - x.astype(np.float64)) ** 2), rtol=1e-6)
    assert np.isfinite(slope).all()
    left, right = (float(jax.grad(heavy_tail)(jnp.float32(v))) for v in (-1e-4, 1e-4))
    assert abs(left - 1) < 1e-3 and right == 1.0


def test_unsupported_options_are_refused():
    with pytest.raises(ValueError, match=r"A_activation must be one of \('softplus', 'heavy_tail'\), got 'relu'"):
        Mamba3(16, A_activation="relu", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"mimo_rank must be a positive int, got 0"):
        Mamba3(16, is_mimo=True, mimo_rank=0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"rope_fraction must be 0\.5 or 1\.0, got 0\.25"):
        Mamba3(16, rope_fraction=0.25, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="must be a multiple of headdim=24"):
        Mamba3(16, headdim=24, rngs=nnx.Rngs(0))


def test_a_tiny_mamba3_language_model_trains_through_the_loop(tmp_path):
    """mamba3-tiny through the one training loop: the loss falls over 12 steps, the step traced once."""
    from jax_mamba.configs import load_config
    from jax_mamba.train.loop import train
    from tests.jax_mamba.training_runs import QUIET, losses

    overrides = [*QUIET, "--max_steps=12", "--eval_every=12", "--save_checkpoints=false", "--log_every=1"]
    result = train(load_config("mamba3-tiny", overrides), run_dir=tmp_path, echo=lambda *_: None)
    curve = np.asarray([loss for _, loss in sorted(losses(tmp_path).items())])
    assert result.step == 12 and result.traces == 1 and np.all(np.isfinite(curve))
    assert np.mean(curve[-3:]) < np.mean(curve[:3]) - 0.2


def test_pallas_impl_in_bf16_is_as_exact_as_the_reference(rng, monkeypatch):
    """``impl="pallas"`` with bfloat16 compute puts the SISO core on its Mosaic GPU kernels (interpreted here): its
    output and every parameter gradient as far from the float32 module's as the reference's bfloat16 run is, or as
    the reference run with the kernels' operand roundings (``kernel_rounding_scan``: the kernels round q, k and u as
    mamba-ssm's Triton op does, which the reference does not), up to REFERENCE_FACTOR; or within bfloat16's bound.
    The per-head sums over batch x L (d dt_bias, dD) get PER_HEAD_SUM_FACTOR x that bound, as on the GPU: their
    terms cancel (sum |g| / |sum g| up to 45 in the core's dADT), so the kernels' bfloat16-level error in each term
    (under 0.5% in dADT and dDT) moved one head's d dt_bias by 1.7% where the reference's run moved it by 0.1%.
    A sequence of 70 (past one 64-step block), two groups."""
    from compare.parity.tolerances import compare, reference_noise_scale
    from pallas_kernels.mamba3 import reference
    from tests.jax_mamba.test_modules import parameter_grads
    from tests.pallas_kernels.gpu_checks import PER_HEAD_SUM_FACTOR, PER_HEAD_SUMS
    from tests.pallas_kernels.test_mamba3_kernels import kernel_rounding_scan

    def module(dtype):
        mixer = Mamba3(32, d_state=16, headdim=16, ngroups=2, dtype=dtype, rngs=nnx.Rngs(2))
        return perturb(mixer, np.random.default_rng(seed))

    def results(mixer, impl):
        return run(mixer, x), parameter_grads(mixer, x, impl)

    seed = int(rng.integers(2**31))
    x = jnp.asarray(rng.normal(size=(2, 70, 32)), jnp.float32)
    low, exact = module(jnp.bfloat16), module(jnp.float32)
    ours, rounded, want = results(low, "pallas"), results(low, "reference"), results(exact, "reference")
    monkeypatch.setattr(reference, "scan_chunks", kernel_rounding_scan)
    emulated = results(low, "reference")
    assert ours[0].dtype == jnp.bfloat16
    rows = [("output", *(r[0] for r in (ours, rounded, emulated, want)))]
    rows += [(f"d{k}", *(r[1][k] for r in (ours, rounded, emulated, want))) for k in want[1]]
    for name, got, *references, expected in rows:
        least = PER_HEAD_SUM_FACTOR if name.removeprefix("d") in PER_HEAD_SUMS else 1.0
        scale = max(reference_noise_scale(r, expected, jnp.bfloat16, least) for r in references)
        row = compare(name, got, expected, jnp.bfloat16, scale)
        assert row.passed, row
