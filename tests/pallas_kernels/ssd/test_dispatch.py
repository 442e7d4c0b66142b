"""Which kernels a config runs for a shape: the Mosaic GPU kernels only where they cover the shape, and the pre-gate
output kept only for a backward that reads it. Traced, with the kernels' entry points recorded; the values of each
path are the oracle cases of test_kernels.py."""

import dataclasses

import jax
import jax.numpy as jnp

from pallas_kernels import mamba_chunk_scan_combined
from pallas_kernels.ssd.config import SsdConfig
from pallas_kernels.ssd.dims import SsdDims
from tests.pallas_kernels.ssd.configs import (
    MOSAIC,
    MOSAIC_DX,
    MOSAIC_FORWARD,
    MOSAIC_FORWARD_KEPT,
    MOSAIC_SEGMENTS,
    MOSAIC_SEGMENTS_KEPT,
)
from tests.pallas_kernels.test_ssd_reference import INF, make_inputs


def test_mosaic_gpu_backward_kernels_cover_16_bit_shapes_in_blocks_and_tiles_of_64():
    """``mosaic_dx_supported`` and ``mosaic_dbc_supported``: the shapes the Mosaic GPU kernels take (the rest stay
    on the Triton kernels)."""
    from pallas_kernels.ssd.dims import ssd_dims
    from pallas_kernels.ssd.mosaic_gpu.backward_dbc import mosaic_dbc_supported
    from pallas_kernels.ssd.mosaic_gpu.backward_dx import mosaic_dx_supported

    def covered(seqlen=128, headdim=64, dstate=64, dtype=jnp.bfloat16, seq=False, block_l=64, kernel="dx"):
        x = jnp.zeros((1, seqlen, 2, headdim), dtype)
        B = jnp.zeros((1, seqlen, 1, dstate), dtype)
        seq_idx = jnp.zeros((1, seqlen), jnp.int32) if seq else None
        dims = ssd_dims(x, B, None, None, None, None, seq_idx, True, (0.0, INF), block_l, 64, True)
        return (mosaic_dx_supported if kernel == "dx" else mosaic_dbc_supported)(dims, dtype)

    for kernel in ("dx", "dbc"):
        assert covered(kernel=kernel) and covered(headdim=128, dstate=256, dtype=jnp.float16, kernel=kernel)
        assert not covered(seqlen=100, kernel=kernel)  # a partial last block
        assert not covered(headdim=48, kernel=kernel) and not covered(dstate=40, kernel=kernel)
        assert not covered(dstate=512, kernel=kernel) and not covered(dtype=jnp.float32, kernel=kernel)
        assert not covered(seq=True, kernel=kernel) and not covered(block_l=32, kernel=kernel)
    assert covered(dstate=192) and not covered(dstate=192, kernel="dbc")  # dB/dC's column tiles: N <= 128 or 256


def trace_pallas(arrays: dict, seq_idx, config: SsdConfig, *, backward: bool = True) -> None:
    """Traces, without compiling or running, the Pallas forward (and backward, pulling back its own outputs) of
    every non-None input at chunk 64: a shape's kernels are chosen while tracing, so the dispatch tests here need
    no interpreted run (the values of each dispatch are the oracle cases of test_kernels.py)."""
    names = [k for k, v in arrays.items() if v is not None]

    def forward(*values):
        return mamba_chunk_scan_combined(
            **dict(zip(names, values, strict=True)),
            chunk_size=64,
            seq_idx=None if seq_idx is None else jnp.asarray(seq_idx),
            dt_softplus=True,
            return_final_states=True,
            impl="pallas",
            config=config,
        )

    def traced(*values):
        outputs, vjp = jax.vjp(forward, *values)
        return vjp(outputs) if backward else outputs

    jax.eval_shape(traced, *[arrays[k] for k in names])


def test_the_backward_runs_the_mosaic_gpu_kernels_only_where_they_cover_the_shape(rng, monkeypatch):
    """``bwd_dx_mosaic`` and ``bwd_dbc_mosaic`` send a covered shape to ``mosaic_dx`` and ``mosaic_dbc`` and the
    others (seq_idx here) to the Triton kernels (the gradients of both: the cases ``mosaic*`` of test_kernels.py);
    each switch alone moves its own kernel."""
    from pallas_kernels.ssd import dispatch

    jax.clear_caches()  # traced afresh: a call cached by an earlier test (vjp.py's jit) would record nothing
    calls = []
    dims_of = lambda args: next(a for a in args if isinstance(a, SsdDims))  # noqa: E731
    for name in ("mosaic_dx", "mosaic_dbc"):
        real = getattr(dispatch, name)
        monkeypatch.setattr(dispatch, name, lambda *a, n=name, f=real: calls.append((n, dims_of(a))) or f(*a))
    runs = ((False, MOSAIC, ["mosaic_dx", "mosaic_dbc"]), (True, MOSAIC, []))  # with seq_idx: none
    runs += ((False, MOSAIC_DX, ["mosaic_dx"]), (False, SsdConfig(bwd_dbc_mosaic=True), ["mosaic_dbc"]))
    for seq, config, expected in runs:
        calls.clear()
        arrays, _, seq_idx = make_inputs(rng, 1, 128, 2, 64, 64, 1, jnp.bfloat16, seq=seq)
        trace_pallas(arrays, seq_idx, config)
        assert [name for name, _ in calls] == expected, (seq, config)
        assert not any(dims.has_seq for _, dims in calls)


def test_the_forward_keeps_the_pre_gate_output_only_for_a_backward_that_reads_it(rng, monkeypatch):
    """The Mosaic GPU per-head kernel recomputes the pre-gate output (its dz is checked against the oracle in the
    ``mosaic*`` cases of test_kernels.py), so the forward leaves it out of the residuals there; the Triton kernel,
    which reads it, gets it: seq_idx, the switch off, a partial last block."""
    from pallas_kernels.ssd import vjp

    jax.clear_caches()  # traced afresh: a call cached by an earlier test (vjp.py's jit) would record nothing
    kept = []
    real = vjp.ssd_backward
    monkeypatch.setattr(vjp, "ssd_backward", lambda *a: kept.append(a[11] is not None) or real(*a))
    runs = [(False, 128, MOSAIC, False), (False, 128, MOSAIC_DX, False), (False, 128, MOSAIC_FORWARD, False)]
    runs += [(True, 128, MOSAIC, True), (False, 100, MOSAIC, True), (False, 128, SsdConfig(), True)]
    for seq, seqlen, config, expected in runs:
        kept.clear()
        arrays, _, seq_idx = make_inputs(rng, 1, seqlen, 2, 64, 64, 1, jnp.bfloat16, seq=seq)
        trace_pallas(arrays, seq_idx, config)
        assert kept == [expected], (seq, seqlen, config)


def test_the_forward_walks_on_mosaic_gpu_only_where_it_covers_the_shape(rng, monkeypatch):
    """``fwd_mosaic`` sends the fused walks (whole, per segment) of a covered shape to ``mosaic_walk``, and the rest
    to the Triton kernels: seq_idx, a partial last block. A whole walk that keeps float32 states every few blocks
    runs per segment of them (the Mosaic walk stores every block's or none). Outputs and final states agree with the
    oracle either way (the cases ``mosaic-forward*`` and ``mosaic-segments*`` of test_kernels.py)."""
    from pallas_kernels.ssd import dispatch

    jax.clear_caches()  # traced afresh: a call cached by an earlier test (vjp.py's jit) would record nothing
    calls = []
    real = dispatch.mosaic_walk
    monkeypatch.setattr(dispatch, "mosaic_walk", lambda *a, **k: calls.append(k["segment_blocks"]) or real(*a, **k))
    runs = [  # seq_idx, L, config, the walks' segment lengths in blocks
        (False, 192, MOSAIC_FORWARD, [3]),
        (False, 320, MOSAIC_SEGMENTS, [2]),
        (False, 320, MOSAIC_SEGMENTS_KEPT, [2]),
        (True, 192, MOSAIC_FORWARD, []),
        (False, 100, MOSAIC_FORWARD, []),
        (False, 192, MOSAIC_FORWARD_KEPT, [2]),
        (False, 192, MOSAIC, []),
    ]
    for seq, seqlen, config, expected in runs:
        calls.clear()
        arrays, _, seq_idx = make_inputs(rng, 1, seqlen, 2, 64, 64, 1, jnp.bfloat16, init=False, seq=seq)
        trace_pallas(arrays, seq_idx, config, backward=False)
        assert calls == expected, (seq, seqlen, config)


def test_the_state_passes_walk_on_mosaic_gpu_only_where_it_covers_the_shape(rng, monkeypatch):
    """``states_mosaic`` sends every sequential state pass of a covered shape, forward and backward, to
    ``mosaic_state_walk``, and the rest to the Triton kernels: seq_idx, a partial last block, the switch off. Their
    values are the cases ``mosaic-forward*`` and ``mosaic-segments*`` of test_kernels.py: here, which walks a
    forward+backward traces."""
    from pallas_kernels.ssd import dispatch

    jax.clear_caches()  # traced afresh: a call cached by an earlier test (vjp.py's jit) would record nothing
    calls = []
    real = dispatch.mosaic_state_walk

    def record(*args, **kwargs):
        calls.append(tuple(kwargs[k] for k in ("reverse", "segment_blocks", "states", "end")))
        return real(*args, **kwargs)

    monkeypatch.setattr(dispatch, "mosaic_state_walk", record)
    local, segment_grads = (False, 2, False, True), [(True, 2, False, True), (True, 2, True, False)]
    runs = [  # seq_idx, L, config, the walks (reverse, segment blocks, block states stored, end state left)
        (False, 192, MOSAIC_FORWARD, [(True, 3, True, True)]),  # the one-level backward, to d initial_states
        (False, 320, MOSAIC_SEGMENTS, [local, *segment_grads]),
        (False, 320, MOSAIC_SEGMENTS_KEPT, [local, (False, 2, True, False), *segment_grads]),  # the rebuild
        (True, 320, MOSAIC_SEGMENTS_KEPT, []),
        (False, 100, MOSAIC_FORWARD, []),
        (False, 320, dataclasses.replace(MOSAIC_SEGMENTS_KEPT, states_mosaic=False), []),
    ]
    for seq, seqlen, config, expected in runs:
        calls.clear()
        arrays, _, seq_idx = make_inputs(rng, 1, seqlen, 2, 64, 64, 1, jnp.bfloat16, seq=seq)
        trace_pallas(arrays, seq_idx, config)
        assert calls == expected, (seq, seqlen, config)
