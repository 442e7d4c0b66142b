"""On a GPU (marked ``gpu``): our Mamba-3 SISO reference against mamba-ssm's Triton ops, forward, final states and
every gradient, and the decoding step. Both sides get the same bfloat16-rounded Q, K, V, Z, Trap and Angles (the
Triton ops round them on entry); mamba-ssm also keeps its cumulative angles and some products in bfloat16, so the
tolerance is bfloat16's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.tolerances import assert_close
from pallas_kernels.mamba3.api import mamba3_siso_combined, mamba3_siso_step
from tests.pallas_kernels.test_mamba3_reference import as_jax, random_inputs, steps_of

pytestmark = pytest.mark.gpu
ROUNDED = ("Q", "K", "V", "Z", "Trap", "Angles")  # what the Triton ops round to bfloat16


@pytest.mark.parametrize(
    "batch,seqlen,groups,heads,has_states",
    [(2, 256, 1, 4, False), (1, 200, 2, 4, True)],
    ids=["130m-heads", "partial-chunk-groups-states"],
)
def test_siso_combined_against_mamba_ssm(cuda_triton_reference, rng, batch, seqlen, groups, heads, has_states):
    from torch_reference import mamba3_ops

    args, states = random_inputs(rng, batch, seqlen, groups, heads, 64, 128, 32, True, True, has_states)
    args = {k: mamba3_ops.round_bf16(v) if k in ROUNDED else v for k, v in args.items()}
    dout = rng.normal(size=args["V"].shape)
    theirs = mamba3_ops.siso_combined(args, states, 64, dout)

    jargs, jstates = as_jax(args, states)

    def run(kw, st):
        return mamba3_siso_combined(**kw, Input_States=st, chunk_size=64, return_final_states=True)

    (out, *finals), pull = jax.vjp(run, jargs, jstates)
    zeros = [jnp.zeros_like(f) for f in finals]
    grads, state_grads = pull((jnp.asarray(dout, jnp.float32), *zeros))
    assert_close("out", out, theirs["out"], jnp.bfloat16)
    for name, got in zip(("ssm", "k", "v"), finals[1:], strict=True):
        assert_close(f"final {name}", got, theirs[name], jnp.bfloat16)
    assert_close("final angle cos", np.cos(finals[0]), np.cos(theirs["angle"]), jnp.bfloat16)
    for name, grad in grads.items():
        if grad is not None:
            assert_close(f"d{name}", grad, theirs[f"d{name}"], jnp.bfloat16)
    for name, grad in zip(("angle", "ssm", "k", "v"), state_grads or (), strict=False):
        assert_close(f"d input {name}", grad, theirs[f"d input {name}"], jnp.bfloat16)


def test_siso_step_against_mamba_ssm(cuda_triton_reference, rng):
    from torch_reference import mamba3_ops

    args, states = random_inputs(rng, 4, 1, 1, 8, 64, 128, 32, True, True, True)
    args = {k: mamba3_ops.round_bf16(v) if k in ROUNDED else v for k, v in args.items()}
    theirs = mamba3_ops.siso_step({k: np.asarray(v) for k, v in steps_of(args, 0).items()}, states)
    jargs, jstates = as_jax(args, states)
    out, new_states = jax.jit(mamba3_siso_step)(**steps_of(jargs, 0), Input_States=jstates)
    assert_close("out", out, theirs["out"], jnp.bfloat16)
    for name, got in zip(("ssm", "k", "v"), new_states[1:], strict=True):
        assert_close(f"new {name}", got, theirs[name], jnp.bfloat16)
