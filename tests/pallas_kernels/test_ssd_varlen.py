"""Varlen states of the chunked SSD (``cu_seqlens`` / ``return_varlen_states``): each packed sequence's row equals
the final state of a separate run of that sequence, forward and gradients, whatever the chunk size and impl; without
seq_idx, the scan's own state at each end; argument checks."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import mamba_chunk_scan_combined
from tests.pallas_kernels.test_ssd_reference import make_inputs

LENGTHS = [23, 40, 1, 17]  # a length-1 sequence; sequences crossing chunk boundaries and ending inside chunks


def _packed(rng, lengths, dtype=jnp.float32):
    arrays, _, _ = make_inputs(rng, 1, sum(lengths), 4, 4, 8, 2, dtype)
    seq_idx = jnp.asarray(np.repeat(np.arange(len(lengths)), lengths)[None].astype(np.int32))
    cu_seqlens = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return arrays, seq_idx, cu_seqlens


def _scan(arrays, chunk, **kw):
    names = ("x", "dt", "A", "B", "C")
    return mamba_chunk_scan_combined(
        *(arrays[k] for k in names),
        chunk,
        D=arrays["D"],
        z=arrays["z"],
        dt_bias=arrays["dt_bias"],
        dt_softplus=True,
        **kw,
    )


def _separate_final_states(arrays, lengths, chunk):
    """Each sequence run alone (initial_states for sequence 0 only): its final state (H, P, N) per sequence."""
    finals, start = [], 0
    for i, length in enumerate(lengths):
        part = {k: v[:, start : start + length] if k in ("x", "dt", "B", "C", "z") else v for k, v in arrays.items()}
        _, final = _scan(part, chunk, initial_states=arrays["initial_states"] if i == 0 else None,
                         return_final_states=True)  # fmt: skip
        finals.append(final[0])
        start += length
    return jnp.stack(finals)


@pytest.mark.parametrize("impl,chunk", [("reference", 8), ("reference", 16), ("reference", 64), ("pallas", 16)])
def test_varlen_states_equal_separate_runs(rng, impl, chunk):
    """Packed with and without varlen or final states, and each sequence alone, as one compiled program."""
    arrays, seq_idx, cu_seqlens = _packed(rng, LENGTHS)

    @jax.jit
    def runs(arrays):
        init = arrays["initial_states"]
        varlen_run = _scan(
            arrays,
            chunk,
            initial_states=init,
            seq_idx=seq_idx,
            cu_seqlens=cu_seqlens,
            return_final_states=True,
            return_varlen_states=True,
            impl=impl,
        )
        plain = _scan(arrays, chunk, initial_states=init, seq_idx=seq_idx, impl=impl)
        only = _scan(arrays, chunk, seq_idx=seq_idx, cu_seqlens=cu_seqlens, return_varlen_states=True, impl=impl)
        return varlen_run, plain, only, _separate_final_states(arrays, LENGTHS, chunk)

    (out, final, varlen), plain, (only, states), want = runs(arrays)
    assert varlen.shape == (len(LENGTHS), 4, 4, 8) and varlen.dtype == jnp.float32
    assert_close("varlen states", varlen, want, jnp.float32)
    assert_close("final state = the last sequence's row", final[0], varlen[-1], jnp.float32)
    assert_close("out unchanged by asking for varlen states", out, plain, jnp.float32)
    assert only.shape == out.shape and states.shape == varlen.shape  # (out, varlen_states) without final states


def test_varlen_state_gradients_equal_separate_runs(rng):
    arrays, seq_idx, cu_seqlens = _packed(rng, [9, 1, 14])
    weights = jnp.asarray(rng.normal(size=(3, 4, 4, 8)), jnp.float32)
    diff = ("x", "dt", "B", "C", "dt_bias", "A")

    def packed_loss(*xs):
        a = {**arrays, **dict(zip(diff, xs, strict=True))}
        _, varlen = _scan(a, 8, seq_idx=seq_idx, cu_seqlens=cu_seqlens, return_varlen_states=True)
        return jnp.sum(varlen * weights)

    def separate_loss(*xs):
        a = {**arrays, **dict(zip(diff, xs, strict=True)), "initial_states": None}
        return jnp.sum(_separate_final_states(a, [9, 1, 14], 8) * weights)

    argnums = tuple(range(len(diff)))
    both = jax.jit(lambda *xs: (jax.grad(packed_loss, argnums)(*xs), jax.grad(separate_loss, argnums)(*xs)))
    got, want = both(*(arrays[k] for k in diff))
    for name, g, w in zip(diff, got, want, strict=True):
        assert_close(f"d{name}", g, w, jnp.float32)


def test_without_seq_idx_each_row_is_the_scans_state_at_that_end(rng):
    """No resets: row i is the final state of the scan over positions 0 .. cu_seqlens[i + 1] - 1 (traced
    cu_seqlens under jit; the prefix runs in the same program)."""
    lengths = [5, 30, 12]
    arrays, _, cu_seqlens = _packed(rng, lengths)

    @jax.jit
    def rows_and_prefixes(cu):
        varlen = _scan(arrays, 16, cu_seqlens=cu, return_varlen_states=True)[1]
        finals = []
        for end in np.cumsum(lengths):
            prefix = {k: v[:, :end] if k in ("x", "dt", "B", "C", "z") else v for k, v in arrays.items()}
            finals.append(_scan(prefix, 16, return_final_states=True)[1][0])
        return varlen, finals

    varlen, finals = rows_and_prefixes(cu_seqlens)
    for i, final in enumerate(finals):
        assert_close(f"row {i}", varlen[i], final, jnp.float32)


def test_bf16_inputs(rng):
    arrays, seq_idx, cu_seqlens = _packed(rng, LENGTHS, jnp.bfloat16)

    @jax.jit
    def packed_and_separate(arrays):
        _, varlen = _scan(arrays, 16, seq_idx=seq_idx, cu_seqlens=cu_seqlens, return_varlen_states=True)
        return varlen, _separate_final_states({**arrays, "initial_states": None}, LENGTHS, 16)

    varlen, want = packed_and_separate(arrays)
    assert_close("varlen states", varlen, want, jnp.bfloat16)


BAD = [
    ({"cu_seqlens": None}, "return_varlen_states needs cu_seqlens"),
    ({"cu_seqlens": jnp.asarray([0.0, 6.0])}, "cu_seqlens must be an integer array"),
    ({"cu_seqlens": jnp.asarray([6])}, "cu_seqlens must be an integer array (num_sequences + 1,) with at least 2"),
    ({"cu_seqlens": jnp.asarray([[0, 6]])}, "cu_seqlens must have rank 1"),
    ({"cu_seqlens": jnp.asarray([1, 6])}, "cu_seqlens must increase strictly from 0 to L=6"),
    ({"cu_seqlens": jnp.asarray([0, 5])}, "cu_seqlens must increase strictly from 0 to L=6"),
    ({"cu_seqlens": jnp.asarray([0, 3, 3, 6])}, "(no empty sequence), got [0, 3, 3, 6]"),
]


@pytest.mark.parametrize("override,message", BAD)
def test_bad_cu_seqlens_name_the_argument(rng, override, message):
    arrays, _, _ = make_inputs(rng, 1, 6, 4, 2, 3, 2, jnp.float32)
    kw = {**arrays, "chunk_size": 4, "cu_seqlens": jnp.asarray([0, 2, 6]), "return_varlen_states": True, **override}
    with pytest.raises(ValueError, match=re.escape(message)):
        mamba_chunk_scan_combined(**kw)


def test_varlen_states_need_batch_1(rng):
    arrays, _, _ = make_inputs(rng, 2, 6, 4, 2, 3, 2, jnp.float32)
    with pytest.raises(ValueError, match="return_varlen_states needs batch 1"):
        mamba_chunk_scan_combined(**arrays, chunk_size=4, cu_seqlens=jnp.asarray([0, 6]), return_varlen_states=True)
    cu_seqlens = jnp.asarray([0, 6])  # ignored without return_varlen_states, as mamba-ssm does
    out = jax.eval_shape(lambda a: mamba_chunk_scan_combined(**a, chunk_size=4, cu_seqlens=cu_seqlens), arrays)
    assert out.shape == arrays["x"].shape
