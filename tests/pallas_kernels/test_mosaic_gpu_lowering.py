"""The Mosaic GPU kernels of the selective scan, the causal conv1d, Mamba-3's SISO scan and the decoding steps lowered
for a CUDA GPU on the CPU machine: the compiled path's Pallas-to-Mosaic lowering (layout inference, the
shared-memory and TMA operations, the reductions) runs without a GPU, so that a kernel the interpreter accepts but
the compiler would refuse fails here, before any GPU time. The program is only lowered (PTX comes when a GPU
compiles it); the values are checked in interpret mode (test_selective_scan_pallas.py, test_causal_conv1d_pallas.py,
test_mamba3_kernels.py, test_mamba3_step_kernel.py, test_selective_state_update.py) and compiled on the GPU (the
``gpu`` tests)."""

import functools
import re

import jax
import jax.numpy as jnp
import pytest

from pallas_kernels.causal_conv1d import vjp as conv_vjp
from pallas_kernels.causal_conv1d.config import ConvConfig
from pallas_kernels.mamba3 import reference as mamba3_reference
from pallas_kernels.mamba3.kernel_scan import kernel_scan
from pallas_kernels.selective_scan import vjp as scan_vjp
from pallas_kernels.selective_scan.config import ScanConfig
from pallas_kernels.selective_state_update.mosaic_gpu.kernel import state_step
from pallas_kernels.ssd.config import SsdConfig

MOSAIC_CALL = re.compile(r"custom_call @mosaic_gpu")
TRITON_CALL = re.compile(r"custom_call @__gpu\$xla\.gpu\.triton")


def _lowered_gradient(loss, *args) -> str:
    """The StableHLO text of the program of ``loss`` and its gradient lowered for CUDA."""
    grad = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(args)))))
    return grad.trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize(
    "dim,dstate,groups,dtype,options,chunk,segments,kept,kernels",
    [(256, 16, 1, jnp.bfloat16, True, 8, 1, 0, 2), (384, 4, 3, jnp.bfloat16, False, 4, 3, 32, 5)],
    ids=["130m-like", "four-states-three-groups-segments-kept-packed"],
)
def test_selective_scan_forward_and_backward_lower_for_cuda(
    dim, dstate, groups, dtype, options, chunk, segments, kept, kernels
):
    """Both passes on Mosaic GPU and no Triton kernel, with D, z and delta_bias and without: one kernel each; over
    segments of L each pass's boundary kernel too, and with states kept every ``kept`` steps the rebuild (this case
    with packed sequences too, over an L whose (batch, L) float32 keep mask rows are not whole 16-byte units)."""
    batch, seqlen = 2, 100 if options else 101
    config = ScanConfig(
        fwd_backend="mosaic_gpu", bwd_backend="mosaic_gpu", chunk=chunk, segments=segments, checkpoint_every=kept
    )
    x = jnp.zeros((batch, seqlen, dim), dtype)
    bc = jnp.zeros((batch, seqlen, groups, dstate), dtype)
    vec = jnp.zeros((dim,), jnp.float32) if options else None
    keep = None if options else jnp.ones((batch, seqlen), jnp.float32)

    def loss(u, delta, A, B, C):
        z = u if options else None
        out, last = scan_vjp.selective_scan(u, delta, A, B, C, vec, z, vec, keep, options, config, False)
        return out.astype(jnp.float32).sum() + last.sum()

    text = _lowered_gradient(loss, x, x, jnp.zeros((dim, dstate), jnp.float32), bc, bc)
    assert len(MOSAIC_CALL.findall(text)) == kernels and not TRITON_CALL.search(text)


def test_causal_conv1d_forward_and_backward_lower_for_cuda():
    config = ConvConfig(backend="mosaic_gpu", bwd_backend="mosaic_gpu")
    x = jnp.zeros((2, 100, 512), jnp.bfloat16)

    def loss(x, weight, bias):
        return conv_vjp.causal_conv1d(x, weight, bias, None, None, True, config, False).astype(jnp.float32).sum()

    text = _lowered_gradient(loss, x, jnp.zeros((512, 4), jnp.bfloat16), jnp.zeros((512,), jnp.bfloat16))
    assert len(MOSAIC_CALL.findall(text)) >= 2 and not TRITON_CALL.search(text)


def test_mamba3_siso_forward_and_backward_lower_for_cuda():
    """Mamba-3's SISO scan on the SSD's Mosaic GPU kernels, four and no Triton kernel: the forward walk, the reverse
    state walk and the two per-block gradient kernels, with input states, D and z, L and N padded. (Over segments the
    same kernels run with fewer blocks a program, beside the SSD's Triton walk over segments: ssd/test_lowering.py.)"""
    batch, seqlen, heads, headdim, dstate, pairs = 2, 200, 2, 64, 96, 8
    bf16, f32 = jnp.bfloat16, jnp.float32
    args = dict(
        Q=jnp.zeros((batch, seqlen, 1, dstate), bf16),
        K=jnp.zeros((batch, seqlen, 1, dstate), bf16),
        V=jnp.zeros((batch, seqlen, heads, headdim), bf16),
        ADT=jnp.zeros((batch, heads, seqlen), f32),
        DT=jnp.zeros((batch, heads, seqlen), f32),
        Trap=jnp.zeros((batch, heads, seqlen), f32),
        Q_bias=jnp.zeros((heads, dstate), f32),
        K_bias=jnp.zeros((heads, dstate), f32),
        Angles=jnp.zeros((batch, seqlen, heads, pairs), f32),
        D=jnp.zeros((heads,), f32),
        Z=jnp.zeros((batch, seqlen, heads, headdim), bf16),
    )
    states = (
        jnp.zeros((batch, heads, pairs), f32),
        jnp.zeros((batch, heads, headdim, dstate), f32),
        jnp.zeros((batch, heads, dstate), f32),
        jnp.zeros((batch, heads, headdim), bf16),
    )

    scan = functools.partial(kernel_scan, dtype=bf16, config=SsdConfig(), interpret=False)

    def loss(args, states):
        out, (_, ssm, _, _) = mamba3_reference.mamba3_siso(**args, states=states, chunk_size=64, scan=scan)
        return out.astype(f32).sum() + ssm.sum()

    text = _lowered_gradient(loss, args, states)
    assert len(MOSAIC_CALL.findall(text)) == 4 and not TRITON_CALL.search(text)


def test_mamba3_mixer_remat_keeps_the_kernels_states_and_output(monkeypatch):
    """A Mamba-3 mixer on the kernels under its remat, lowered for CUDA as on a Hopper GPU: the backward recomputes
    the rotations and scales but not the kernels' forward (its states and output are kept), so the program has the
    four kernels once each, as the op alone."""
    from flax import nnx

    from jax_mamba.models import ParamLayout
    from jax_mamba.modules.mamba3 import Mamba3
    from pallas_kernels.mamba3 import dispatch

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")  # the kernels compiled, the mixer's remat on
    monkeypatch.setattr(dispatch, "gpu_has_wgmma", lambda: True)
    mixer = Mamba3(64, d_state=64, headdim=64, dtype=jnp.bfloat16, impl="reference", rngs=nnx.Rngs(0))
    mixer.impl = "pallas"  # the SISO op on the kernels; its norms and matmuls stay in XLA (their kernels are Triton)
    layout, params, _ = ParamLayout.split(mixer)
    x = jnp.zeros((2, 128, 64), jnp.float32)
    text = _lowered_gradient(lambda p: jnp.sum(layout.merge(p)(x).astype(jnp.float32) ** 2), params)
    assert len(MOSAIC_CALL.findall(text)) == 4 and not TRITON_CALL.search(text)


@pytest.mark.parametrize("state_dtype,rank,tile", [(jnp.float32, 1, True), (jnp.bfloat16, 4, False)])
def test_decoding_step_kernel_lowers_for_cuda(state_dtype, rank, tile):
    """The decoding steps' kernel (selective state update, Mamba-3), one kernel: a float32 state with one rank's
    terms and A's (P, N) tile for the decay (Mamba-1), a bfloat16 state with rank 4's eight terms and four
    read-outs (Mamba-3 MIMO), over two 64-row tiles of P."""
    batch, heads, headdim, dstate = 2, 3, 128, 16
    state = jnp.zeros((batch, heads, headdim, dstate), state_dtype)
    rows = jnp.zeros((batch, heads, 1 + 2 * rank, headdim), jnp.float32)
    cols = jnp.zeros((batch, heads, 3 * rank, dstate), jnp.float32)
    A = jnp.zeros((heads, headdim, dstate), jnp.float32) if tile else None
    step = jax.jit(functools.partial(state_step, queries=rank, interpret=False, A=A))
    text = step.trace(state, rows, cols).lower(lowering_platforms=("cuda",)).as_text()
    assert len(MOSAIC_CALL.findall(text)) == 1 and not TRITON_CALL.search(text)
