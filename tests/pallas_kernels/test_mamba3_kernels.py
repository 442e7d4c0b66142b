"""Mamba-3's SISO and MIMO ops on the Pallas kernels (``impl="pallas"``: the SSD's Mosaic GPU kernels in Pallas's
GPU interpreter, which fills every output with NaN before a kernel runs): outputs and final states against the
float64 oracle (a loop over the recurrence) on the same bfloat16 inputs, every gradient against the JAX reference's
float32 autodiff (itself checked against central differences of the oracle in test_mamba3_reference.py), over awkward
shapes (L of 1 and not a multiple of the kernels' 64-step blocks, head dims and N that are padded, several groups,
input states), the walk in segments, packed sequences, MIMO (ranks 2 and 4, unsummed), and the float32 path."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import REFERENCE_FACTOR, assert_close, compare, gradient_floor, tolerance
from pallas_kernels._triton import interpret_mode
from pallas_kernels.mamba3 import dispatch, reference
from pallas_kernels.mamba3.api import mamba3_mimo, mamba3_siso_combined
from pallas_kernels.mamba3.kernel_scan import kernel_scan
from pallas_kernels.ssd.config import SsdConfig
from tests.pallas_kernels import naive_mamba3
from tests.pallas_kernels.test_mamba3_mimo_reference import mimo_inputs
from tests.pallas_kernels.test_mamba3_reference import assert_angles_close, random_inputs, steps_of

BF16 = jnp.bfloat16
BF16_ARGS = {"Q", "K", "V", "Z"}  # the arguments the kernels get in bfloat16 (the input v state too)
# The kernels round more than ``kernel_rounding_scan`` does (the block states they read, their products' operands):
# where a gradient missed bfloat16's tolerance, it was 0.7-2.0x as far from the float32 reference as that
# emulation's (12 seeds of the four gradient cases below). Held to 3x, the factor gpu_checks gives per-head sums.
ROUNDING_FACTOR = 1.5 * REFERENCE_FACTOR
# ... and a gradient of a per-step scalar (Trap, DT) sums P x N products of those rounded tiles: up to 1.4% from the
# float32 reference where the emulation moved it by under 0.4% (two seeds in 18). The least bound is 1.5x bfloat16's.
LEAST_SCALE = 1.5


@jax.custom_vjp
def bf16_both_ways(x: jax.Array) -> jax.Array:
    """x rounded to bfloat16, and its gradient too: what the kernels do to q, k and u and to their gradients."""
    return x.astype(BF16).astype(x.dtype)


bf16_both_ways.defvjp(lambda x: (bf16_both_ways(x), None), lambda _, g: (g.astype(BF16).astype(g.dtype),))


_REFERENCE_SCAN = reference.scan_chunks  # bound here: a test may put kernel_rounding_scan in its place


def kernel_rounding_scan(q, k, u, *rest):
    """The reference's chunked scan with what the kernels take and give in bfloat16 rounded so, both ways: q, k and u
    and their gradients in, the output and its gradient out."""
    y, final = _REFERENCE_SCAN(bf16_both_ways(q), bf16_both_ways(k), bf16_both_ways(u), *rest)
    return bf16_both_ways(y), final


def rounded(args: dict, states):
    """The inputs as the kernels get them: bfloat16 Q, K, V, Z and input v (float64 copies for the oracle), the
    per-step and per-head values float32."""
    as_np = lambda a, low: None if a is None else np.asarray(jnp.asarray(a, BF16 if low else jnp.float32), np.float64)  # noqa: E731
    args = {k: as_np(v, k in BF16_ARGS) for k, v in args.items()}
    states = None if states is None else tuple(as_np(s, i == 3) for i, s in enumerate(states))
    return args, states


def to_jax(args: dict, states):
    to = lambda a, low: None if a is None else jnp.asarray(a, BF16 if low else jnp.float32)  # noqa: E731
    jstates = None if states is None else tuple(to(s, i == 3) for i, s in enumerate(states))
    return {k: to(v, k in BF16_ARGS) for k, v in args.items()}, jstates


def check_against_oracle(out, finals, args, states, cu_bounds=None, oracle=naive_mamba3.mamba3_forward):
    """out and final states against the float64 oracle, per packed sequence where ``cu_bounds`` is given."""
    if cu_bounds is None:
        want, want_finals = oracle(**args, states=states)
    else:
        outs, per_seq = [], []
        for i, (start, end) in enumerate(itertools.pairwise(cu_bounds)):
            own = None if states is None else tuple(s[i : i + 1] for s in states)
            o, f = oracle(**steps_of(args, slice(start, end)), states=own)
            outs.append(o)
            per_seq.append(f)
        want = np.concatenate(outs, axis=1)
        want_finals = [np.concatenate(parts) for parts in zip(*per_seq, strict=True)]
    assert out.dtype == BF16 and out.shape == want.shape
    assert_close("out", out, want, BF16)
    assert_angles_close("final angle", finals[0], want_finals[0])
    for name, got, expected in zip(("ssm", "k", "v"), finals[1:], want_finals[1:], strict=True):
        assert_close(f"final {name}", got, expected, BF16)


CASES = [  # batch, L, groups, heads, headdim, N, S, D, Z, input states
    (2, 70, 1, 2, 16, 16, 4, True, True, True),  # L past one block, P and N padded to 64
    (1, 1, 2, 2, 64, 64, 8, False, True, False),  # one step, two groups
    (1, 128, 2, 4, 64, 128, 16, True, False, True),  # whole blocks, N of 128 (the dB/dC kernel's 128 columns)
]


@pytest.mark.parametrize("batch,seqlen,groups,heads,headdim,dstate,pairs,has_d,has_z,has_states", CASES)
def test_kernels_match_the_oracle_and_the_reference_gradients(
    rng, batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, has_states
):
    args, states = rounded(
        *random_inputs(rng, batch, seqlen, groups, heads, headdim, dstate, pairs, has_d, has_z, True)
    )
    states = states if has_states else None
    jargs, jstates = to_jax(args, states)

    def kernels(kw, st):
        out, *finals = mamba3_siso_combined(**kw, Input_States=st, return_final_states=True, impl="pallas")
        return out, finals

    dout = jnp.asarray(rng.normal(size=(batch, seqlen, heads, headdim)), jnp.float32)
    dssm = jnp.asarray(rng.normal(size=(batch, heads, headdim, dstate)), jnp.float32)
    out, finals = check_gradients(kernels, reference.mamba3_siso, 64, jargs, jstates, dout, dssm)
    check_against_oracle(out, finals, args, states)


def check_gradients(kernels, reference_fn, chunk: int, jargs: dict, jstates, dout, dssm):
    """The gradients of sum(out * dout) + sum(final ssm * dssm) by ``kernels(args, states)`` -> (out, finals) against
    ``reference_fn`` (the reference's SISO or MIMO function) in float32 on the same inputs (``assert_gradients_close``,
    its bound from the reference with the kernels' roundings); returns the kernels' out and final states."""

    def grad(run):
        def loss(kw, st):
            out, finals = run(kw, st)
            return jnp.sum(out.astype(jnp.float32) * dout) + jnp.sum(finals[1] * dssm), (out, finals)

        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))

    def by_reference(scan):
        return lambda kw, st: reference_fn(**kw, states=st, chunk_size=chunk, scan=scan)

    (_, (out, finals)), got = grad(kernels)(jargs, jstates)
    _, rounding = grad(by_reference(kernel_rounding_scan))(jargs, jstates)
    _, exact = grad(by_reference(None))(*as_float32(jargs, jstates))
    assert_gradients_close(*(g[0] | state_grads(g[1]) for g in (got, rounding, exact)))
    return out, finals


def as_float32(jargs: dict, jstates):
    """The same values in float32: the reference's exact answer for the kernels' inputs."""
    up = lambda a: None if a is None else a.astype(jnp.float32)  # noqa: E731
    return {k: up(v) for k, v in jargs.items()}, None if jstates is None else tuple(map(up, jstates))


def assert_gradients_close(got: dict, rounding: dict, exact: dict) -> None:
    """Kernel gradients ({name: array}; None: no input) against the reference's in float32 on the same inputs
    (``exact``), within LEAST_SCALE x bfloat16's tolerance or ROUNDING_FACTOR x the error of the reference run with
    the kernels' main roundings (``rounding``: the scan's operands and output and their gradients in bfloat16),
    whichever is larger: the rotary angles' gradients run through those rounded values and then through a running
    sum over L that cancels, and that rounding alone moves them by 1-5% (relative L2). Relative to at least
    GRAD_FLOOR x the whole gradient's norm, so that one zero in exact arithmetic (a decay that meets only a zero
    state) is held to that scale, not to its own noise."""
    floor = gradient_floor({k: v for k, v in exact.items() if v is not None})
    for name, value in got.items():
        if value is None:
            continue
        assert np.all(np.isfinite(np.asarray(value, np.float32))), name
        noise = compare(name, rounding[name], exact[name], BF16, floor=floor).rel_l2_err / tolerance(BF16)
        assert_close(f"d{name}", value, exact[name], BF16, max(LEAST_SCALE, ROUNDING_FACTOR * noise), floor)


def state_grads(grads) -> dict:
    """The input states' gradients by name ({} without input states)."""
    return {} if grads is None else dict(zip(("input angle", "input ssm", "input k", "input v"), grads, strict=True))


def test_the_walk_in_segments_matches_the_oracle(rng):
    """Three blocks in segments of two: each segment's end state, the walk over segments, then the forward walk per
    segment from its incoming state (and the same in reverse for the gradients, against the reference's)."""
    args, states = rounded(*random_inputs(rng, 1, 150, 1, 2, 64, 64, 4, True, True, True))
    jargs, jstates = to_jax(args, states)
    config = SsdConfig(two_level_states=True, fused_segments=True, state_segment=128)
    scan = functools.partial(kernel_scan, dtype=BF16, config=config, interpret=interpret_mode())

    def kernels(kw, st):
        return reference.mamba3_siso(**kw, states=st, chunk_size=64, scan=scan)

    dout = jnp.asarray(rng.normal(size=args["V"].shape), jnp.float32)
    dssm = jnp.asarray(rng.normal(size=states[1].shape), jnp.float32)
    out, finals = check_gradients(kernels, reference.mamba3_siso, 64, jargs, jstates, dout, dssm)
    check_against_oracle(out, finals, args, states)


def test_packed_sequences_each_run_as_alone(rng):
    """cu_seqlens with impl="pallas": each sequence from its own input states, as the oracle run on it alone."""
    args, states = rounded(*random_inputs(rng, 1, 90, 1, 2, 16, 16, 4, True, True, False))
    states = rounded(*random_inputs(rng, 2, 1, 1, 2, 16, 16, 4, False, False, True))[1]
    jargs, jstates = to_jax(args, states)
    bounds = (0, 45, 90)  # the second starts inside a block; equal lengths share their compiled programs
    out, *finals = mamba3_siso_combined(
        **jargs, Input_States=jstates, cu_seqlens=np.asarray(bounds), return_final_states=True, impl="pallas"
    )
    check_against_oracle(out, finals, args, states, bounds)


MIMO_CASES = [  # batch, L, R, groups, heads, headdim, N, rotary divisor, D, Z, MIMO_Out, input states
    (2, 37, 4, 1, 2, 16, 16, 4, True, True, True, True),  # 148 positions: three blocks, the last partial
    (1, 1, 2, 2, 2, 64, 64, 2, False, True, False, False),  # one step, two groups, the ranks unsummed
]


@pytest.mark.parametrize("batch,seqlen,rank,groups,heads,headdim,dstate,divisor,has_d,has_z,has_out,states", MIMO_CASES)
def test_mimo_kernels_match_the_oracle_and_the_reference_gradients(
    rng, batch, seqlen, rank, groups, heads, headdim, dstate, divisor, has_d, has_z, has_out, states
):
    """MIMO: each rank's step a position of its own on the kernels, the ranks after it and the trapezoid's term an
    R x R correction per step (``kernel_scan``)."""
    shape = (batch, seqlen, rank, groups, heads, headdim, dstate, divisor, has_d, has_z, has_out, True)
    args, initial = rounded(*mimo_inputs(rng, *shape))
    initial = initial if states else None
    jargs, jstates = to_jax(args, initial)

    def kernels(kw, st):
        out, *finals = mamba3_mimo(
            **kw, Input_States=st, chunk_size=16, rotary_dim_divisor=divisor, return_state=True, impl="pallas"
        )
        return out, finals

    out_shape = (batch, seqlen, heads, headdim) if has_out else (batch, seqlen, rank, heads, headdim)
    dout = jnp.asarray(rng.normal(size=out_shape), jnp.float32)
    dssm = jnp.asarray(rng.normal(size=(batch, heads, headdim, dstate)), jnp.float32)
    out, finals = check_gradients(kernels, reference.mamba3_mimo, 16, jargs, jstates, dout, dssm)
    check_against_oracle(out, finals, args, initial, oracle=naive_mamba3.mamba3_mimo_forward)


def test_float32_inputs_run_the_reference(rng):
    """The kernels' products are 16-bit: float32 V keeps the reference's float32 arithmetic under impl="pallas" (as
    does N past 256)."""
    args, _ = random_inputs(rng, 1, 5, 1, 2, 4, 8, 2, True, True, False)
    jargs = {k: None if v is None else jnp.asarray(v, jnp.float32) for k, v in args.items()}
    assert not dispatch.on_kernels(jnp.float32, 64) and dispatch.on_kernels(BF16, 256)
    assert not dispatch.on_kernels(BF16, 257)  # past the kernels' N of 256: the reference
    got = mamba3_siso_combined(**jargs, impl="pallas")
    want, _ = naive_mamba3.mamba3_forward(**args)
    assert got.dtype == jnp.float32
    assert_close("out", got, want, jnp.float32)
