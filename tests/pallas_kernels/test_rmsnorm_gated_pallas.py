"""Pallas gated RMSNorm in interpret mode (CPU): forward and every gradient against the float64 oracle (gradients by
central differences of the NumPy norm) and against the pure-JAX reference, over awkward shapes and tilings: one row,
rows not a multiple of the row block, groups wider than a column tile (read in several chunks, one partial), groups
that are not powers of two, both gate orders, no gate, bias or none, float32/bfloat16/float16; and its refusals.

Interpret mode fills every output buffer with NaN before the kernel runs, so an element a kernel fails to write
fails the finiteness check in ``assert_close``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import rmsnorm_fn
from pallas_kernels.rmsnorm_gated.config import NormConfig
from tests.pallas_kernels import naive
from tests.pallas_kernels.one_program import forward_and_backward
from tests.pallas_kernels.test_rmsnorm_gated_reference import norm_inputs

# Narrow tiles, so that small shapes take several column chunks, row blocks and backward programs.
NARROW = NormConfig(max_block_cols=8, tile_elements=32, bwd_programs_per_sm=1)
CASES = [  # shape, dtype, group_size, norm_before_gate, gated, bias, config
    ((1, 16), jnp.float32, None, False, True, False, None),  # one row
    ((3, 5, 24), jnp.float32, 12, False, True, True, NARROW),  # groups of 12 in chunks of 8, 15 rows of 4-row blocks
    ((37, 20), jnp.float32, None, True, True, True, NARROW),  # 3 chunks, the last partial; gate after the norm
    ((2, 7, 40), jnp.bfloat16, 8, False, True, False, NARROW),  # 5 groups of one whole chunk
    ((9, 40), jnp.float32, None, True, False, False, NARROW),  # no gate
    ((5, 3, 48), jnp.float16, 24, True, True, True, None),  # the default tiling, 2 groups
    ((2, 33, 24), jnp.bfloat16, None, False, True, True, NormConfig(bwd_programs_per_sm=3)),
]


@pytest.mark.parametrize("shape,dtype,group_size,norm_before_gate,gated,has_bias,config", CASES)
def test_forward_and_gradients_match_oracle_and_reference(
    rng, shape, dtype, group_size, norm_before_gate, gated, has_bias, config
):
    arrays, names = norm_inputs(rng, shape, dtype, gated, has_bias)
    kw = dict(eps=1e-5, group_size=group_size, norm_before_gate=norm_before_gate)

    def run(impl, *xs):
        return rmsnorm_fn(**dict(zip(names, xs, strict=True)), **kw, impl=impl, config=config)

    inputs = [arrays[k] for k in names]
    dout = jnp.asarray(rng.normal(size=shape), dtype)
    out, grads = forward_and_backward(lambda *xs: run("pallas", *xs), inputs, dout)
    grads = dict(zip(names, grads, strict=True))
    _, ref_grads = forward_and_backward(lambda *xs: run("reference", *xs), inputs, dout)
    ref_grads = dict(zip(names, ref_grads, strict=True))

    exact = {k: np.asarray(arrays[k].astype(jnp.float32), np.float64) for k in names}
    dout64 = np.asarray(dout.astype(jnp.float32), np.float64)

    def numpy_norm(**override):
        return naive.rmsnorm_forward(**{**{k: exact.get(k) for k in ("x", "weight", "bias", "z")}, **override}, **kw)

    assert out.dtype == dtype
    assert_close("out", out, numpy_norm(), dtype)
    assert_close("out vs reference", out, run("reference", *inputs), dtype)
    for name in names:
        assert grads[name].dtype == arrays[name].dtype
        want = naive.numeric_grad(lambda v, name=name: numpy_norm(**{name: v}), exact[name].copy(), dout64)
        assert_close(f"d{name}", grads[name], want, arrays[name].dtype)
        assert_close(f"d{name} vs reference", grads[name], ref_grads[name], arrays[name].dtype)


def test_gradients_are_deterministic(rng):
    """dw and db are summed from per-program partials in a fixed order: two runs give the same bits."""
    x = jnp.asarray(rng.normal(size=(50, 24)), jnp.float32)
    z = jnp.asarray(rng.normal(size=(50, 24)), jnp.float32)
    w = jnp.asarray(rng.normal(size=24), jnp.float32)

    def grads():
        loss = lambda w: jnp.sum(rmsnorm_fn(x, w, None, z, group_size=12, impl="pallas", config=NARROW) ** 2)  # noqa: E731
        return np.asarray(jax.grad(loss)(w))

    np.testing.assert_array_equal(grads(), grads())


def test_bad_config_is_refused_before_work():
    x, w = jnp.ones((2, 8)), jnp.ones(8)
    with pytest.raises(ValueError, match=r"NormConfig\.max_block_cols must be a positive power of two, got 6"):
        rmsnorm_fn(x, w, impl="pallas", config=NormConfig(max_block_cols=6))
    with pytest.raises(ValueError, match=r"NormConfig\.bwd_programs_per_sm must be a positive int, got 0"):
        rmsnorm_fn(x, w, impl="pallas", config=NormConfig(bwd_programs_per_sm=0))
    with pytest.raises(ValueError, match="config must be an instance of NormConfig"):
        rmsnorm_fn(x, w, impl="pallas", config={"max_block_cols": 8})


def test_kernels_lower_to_triton_for_an_h100(monkeypatch):
    """Interpret mode never lowers the kernels to Triton: this does, for an H100 (compare.kernels.triton_ir), at a group
    wider than one column tile (two chunks), so that a kernel Pallas's Triton lowering refuses fails here first."""
    from compare.kernels.triton_ir import triton_modules
    from pallas_kernels.rmsnorm_gated import api

    monkeypatch.setattr(api, "interpret_mode", lambda: False)
    x = jax.ShapeDtypeStruct((64, 2 * 5120), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((2 * 5120,), jnp.float32)

    def forward_backward(x, w, b, z):
        out, vjp = jax.vjp(
            lambda *a: rmsnorm_fn(*a, group_size=5120, norm_before_gate=False, impl="pallas"), x, w, b, z
        )
        return vjp(out)

    modules = triton_modules(forward_backward, x, w, w, x)
    assert [name for name, _ in modules] == ["rmsnorm_gated_fwd", "rmsnorm_gated_bwd"]
    assert all("tt.func" in ir for _, ir in modules)
