"""On a GPU (marked ``gpu``): the references at realistic widths, bf16 inputs, against the float64 oracle (forward and
every gradient), so the GPU lowering (chunk lengths, matmul precision) is checked too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import mamba_chunk_scan_combined, selective_scan_fn
from tests.pallas_kernels import test_selective_scan_reference as ss
from tests.pallas_kernels import test_ssd_reference as ssd

pytestmark = pytest.mark.gpu


def _check_vjp(fn, arrays, names, rng, want_fn):
    (out, state), vjp = jax.vjp(jax.jit(fn), *[arrays[k] for k in names])
    dout = jnp.asarray(rng.normal(size=out.shape), out.dtype)
    dstate = jnp.asarray(rng.normal(size=state.shape), jnp.float32)
    grads = dict(zip(names, vjp((dout, dstate)), strict=True))
    want_out, want_state, want_grads = want_fn(
        np.asarray(dout.astype(jnp.float32), np.float64), np.asarray(dstate, np.float64)
    )
    assert_close("out", out, want_out, out.dtype)
    assert_close("state", state, want_state, jnp.float32)
    for name in names:
        assert_close(f"d{name}", grads[name], want_grads[name], arrays[name].dtype)


def test_selective_scan_reference_on_gpu(rng):
    with jax.default_device(jax.devices("gpu")[0]):
        arrays, exact = ss.make_inputs(rng, 2, 600, 96, 16, 1, jnp.bfloat16)
        names = [k for k, v in arrays.items() if v is not None]

        def run(*xs):
            kw = dict(zip(names, xs, strict=True))
            return selective_scan_fn(**kw, delta_softplus=True, return_last_state=True)

        _check_vjp(run, arrays, names, rng, lambda dout, dstate: ss.oracle(exact, True, dout, dstate))


def test_ssd_reference_on_gpu(rng):
    with jax.default_device(jax.devices("gpu")[0]):
        arrays, exact, seq_idx = ssd.make_inputs(rng, 1, 600, 4, 64, 128, 1, jnp.bfloat16, seq=True)
        names = [k for k, v in arrays.items() if v is not None]

        def run(*xs):
            kw = dict(zip(names, xs, strict=True))
            return mamba_chunk_scan_combined(
                **kw, chunk_size=256, seq_idx=jnp.asarray(seq_idx), dt_softplus=True, return_final_states=True
            )

        def want(dout, dstate):
            return ssd.oracle(exact, seq_idx, True, (0.0, float("inf")), dout, dstate)

        _check_vjp(run, arrays, names, rng, want)
