"""The kernels lowered for an H100, as interpret mode never does: each config's Triton kernels, and one Mosaic GPU
kernel of each kind shared by all the calls of one shape."""

import jax
import jax.numpy as jnp
import pytest

from pallas_kernels import mamba_chunk_scan_combined
from pallas_kernels.ssd.config import SsdConfig
from tests.pallas_kernels.ssd.configs import MOSAIC, MOSAIC_DX, MOSAIC_FORWARD, MOSAIC_SEGMENTS, MOSAIC_SEGMENTS_KEPT


@pytest.mark.parametrize(
    ("config", "kernels"),
    [
        (
            SsdConfig(fused_forward_max_l=0, checkpoint_every=1024, two_level_states=True),
            [
                *("ssd_fwd_segment_states", "ssd_fwd_segment_walk", "ssd_fwd_block_states", "ssd_fwd_out"),
                *("ssd_bwd_rebuild_states", "ssd_bwd_segment_dstates", "ssd_bwd_segment_walk"),
                *("ssd_bwd_block_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"),
            ],
        ),
        (
            SsdConfig(fused_forward_max_l=0, checkpoint_every=1024, two_level_states=True, fused_segments=True),
            [
                *("ssd_fwd_segment_states", "ssd_fwd_segment_walk", "ssd_fwd_fused_segments"),
                *("ssd_bwd_rebuild_states", "ssd_bwd_segment_dstates", "ssd_bwd_segment_walk"),
                *("ssd_bwd_block_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"),
            ],
        ),
        (
            SsdConfig(
                fused_forward_max_l=0,
                checkpoint_every=1024,
                two_level_states=True,
                fused_segments=True,
                two_level_backward=False,
            ),
            [
                *("ssd_fwd_segment_states", "ssd_fwd_segment_walk", "ssd_fwd_fused_segments"),
                *("ssd_bwd_rebuild_states", "ssd_bwd_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"),
            ],
        ),
        (
            SsdConfig(fused_forward_max_l=0, two_level_states=True),
            [
                *("ssd_fwd_segment_states", "ssd_fwd_segment_walk", "ssd_fwd_block_states", "ssd_fwd_out"),
                *("ssd_bwd_segment_dstates", "ssd_bwd_segment_walk", "ssd_bwd_block_dstates", "ssd_bwd_dx"),
                "ssd_bwd_dbc",
            ],
        ),
        (SsdConfig(), ["ssd_fwd_fused", "ssd_bwd_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"]),
        (SsdConfig(bwd_rowwise_dcs=True), ["ssd_fwd_fused", "ssd_bwd_dstates", "ssd_bwd_dx", "ssd_bwd_dbc"]),
        # the per-head kernel on Mosaic GPU: gone from the Triton list, and lowered too (its register-layout inference
        # runs in Python, and interpret mode does not choose layouts)
        (MOSAIC_DX, ["ssd_fwd_fused", "ssd_bwd_dstates", "ssd_bwd_dbc"]),
        (MOSAIC, ["ssd_fwd_fused", "ssd_bwd_dstates"]),
        (MOSAIC_FORWARD, []),  # ... and the forward's walk and the state passes: no Triton kernel left
        (MOSAIC_SEGMENTS, ["ssd_fwd_segment_walk", "ssd_bwd_segment_walk"]),  # but the walks over segments
        (MOSAIC_SEGMENTS_KEPT, ["ssd_fwd_segment_walk", "ssd_bwd_segment_walk"]),
    ],
)
def test_kernels_lower_to_triton_for_an_h100(monkeypatch, config, kernels):
    """Interpret mode never lowers the kernels to Triton: this does, for an H100 (compare.kernels.triton_ir), so that a
    kernel Pallas's Triton lowering refuses fails here and not first on the GPU."""
    from compare.kernels.triton_ir import triton_modules
    from pallas_kernels.ssd import api

    monkeypatch.setattr(api, "interpret_mode", lambda: False)
    x = jax.ShapeDtypeStruct((1, 4096, 4, 64), jnp.bfloat16)
    dt = jax.ShapeDtypeStruct((1, 4096, 4), jnp.bfloat16)
    bc = jax.ShapeDtypeStruct((1, 4096, 2, 128), jnp.bfloat16)
    heads = jax.ShapeDtypeStruct((4,), jnp.float32)

    def forward_backward(*args):
        def forward(x, dt, A, B, C, D, z, bias):
            return mamba_chunk_scan_combined(
                x, dt, A, B, C, 256, D=D, z=z, dt_bias=bias, dt_softplus=True, impl="pallas", config=config
            )

        out, vjp = jax.vjp(forward, *args)
        return vjp(out)

    modules = triton_modules(forward_backward, x, dt, heads, bc, bc, heads, x, heads)
    assert [name for name, _ in modules] == kernels
    assert all("tt.func" in ir for _, ir in modules)


def test_calls_of_one_shape_share_each_mosaic_gpu_kernel(monkeypatch):
    """A model calls the SSD once a layer: those calls must lower (and so compile) each Mosaic GPU kernel once. Its
    module carries the call's source locations, so calls lowered apart are different kernels (``kernel_hash``):
    mamba2-130m's 24 layers then took minutes to compile. Lowered for a GPU with ``wgmma`` (an H100), forward and
    backward, every kernel on Mosaic GPU (``MOSAIC_FORWARD``); the 3 calls (a first, a second sharing its kernels and
    one more) differ in their inputs only."""
    import re

    from pallas_kernels.ssd import api

    monkeypatch.setattr(api, "interpret_mode", lambda: False)
    x = jax.ShapeDtypeStruct((1, 256, 2, 64), jnp.bfloat16)
    dt = jax.ShapeDtypeStruct((1, 256, 2), jnp.float32)
    bc = jax.ShapeDtypeStruct((1, 256, 1, 64), jnp.bfloat16)
    heads = jax.ShapeDtypeStruct((2,), jnp.float32)

    def kernels_of(n_calls: int) -> tuple[int, int]:
        def loss(x, dt, A, B, C, D):
            total = 0.0
            for i in range(n_calls):
                kwargs = dict(D=D, z=x, dt_bias=D, dt_softplus=True, impl="pallas", config=MOSAIC_FORWARD)
                out = mamba_chunk_scan_combined(x * (i + 1), dt, A, B, C, 64, **kwargs)
                total = total + out.astype(jnp.float32).sum()
            return total

        grad = jax.jit(jax.grad(loss, argnums=(0, 1, 3, 4)))
        text = grad.trace(x, dt, heads, bc, bc, heads).lower(lowering_platforms=("cuda",)).as_text()
        hashes = re.findall(r'kernel_hash = "(.*?)", module', text)
        return len(set(hashes)), len(hashes)

    distinct_one, _ = kernels_of(1)
    distinct, lowered = kernels_of(3)
    assert distinct_one >= 3  # the forward's walk and the backward's kernels, at least
    assert distinct == distinct_one and lowered == distinct_one
