"""selective_state_update (one decoding step) against a float64 NumPy step, against the chunked ops run over a
sequence (Mamba-1's selective scan, Mamba-2's SSD with initial and final states), and its argument checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from pallas_kernels import mamba_chunk_scan_combined, selective_scan_fn, selective_state_update
from pallas_kernels.selective_state_update.config import StateUpdateConfig


def numpy_step(state, x, dt, A, B, C, D, z, dt_bias, softplus):
    """The step in float64 with a heads axis: state (b, H, P, N), x/dt/z (b, H, P), B/C (b, G, N)."""
    f = lambda v: None if v is None else np.asarray(v, np.float64)  # noqa: E731
    state, x, dt, A, B, C, D, z, dt_bias = map(f, (state, x, dt, A, B, C, D, z, dt_bias))
    if dt_bias is not None:
        dt = dt + dt_bias
    if softplus:
        dt = np.logaddexp(dt, 0.0)
    per_group = state.shape[1] // B.shape[1]
    B, C = np.repeat(B, per_group, axis=1), np.repeat(C, per_group, axis=1)
    new = state * np.exp(dt[..., None] * A) + (dt * x)[..., None] * B[:, :, None, :]
    out = np.einsum("bhpn,bhn->bhp", new, C)
    if D is not None:
        out = out + x * D
    if z is not None:
        out = out * z / (1 + np.exp(-z))
    return out, new


@pytest.mark.parametrize("impl", ["reference", "pallas"])
@pytest.mark.parametrize("heads", [False, True])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("optional", [True, False])
def test_step_matches_float64(rng, impl, heads, dtype, optional):
    batch, nheads, dim, dstate, groups = (3, 6, 5, 7, 3) if heads else (2, 1, 9, 4, 1)
    cast = lambda v, d=dtype: None if v is None else jnp.asarray(v, d)  # noqa: E731
    state = cast(rng.normal(size=(batch, nheads, dim, dstate)), jnp.float32)
    x, dt, z = (cast(rng.normal(size=(batch, nheads, dim))) for _ in range(3))
    A = cast(-np.exp(rng.uniform(-2, 1, (nheads, dim, dstate))), jnp.float32)
    B, C = (cast(rng.normal(size=(batch, groups, dstate))) for _ in range(2))
    D, dt_bias = (
        cast(rng.normal(size=(nheads, dim)), jnp.float32),
        cast(rng.normal(-1, 0.5, (nheads, dim)), jnp.float32),
    )
    if not optional:
        D = z = dt_bias = None
    want_out, want_state = numpy_step(state, x, dt, A, B, C, D, z, dt_bias, optional)  # the rounded inputs
    if not heads:  # Mamba-1 layout: no heads axis; B and C (batch, N)
        state, x, dt, z, B, C = (None if v is None else v[:, 0] for v in (state, x, dt, z, B, C))
        A, D, dt_bias = (None if v is None else v[0] for v in (A, D, dt_bias))
        want_out, want_state = want_out[:, 0], want_state[:, 0]
    out, new_state = selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus=optional, impl=impl)
    assert out.dtype == dtype and new_state.dtype == jnp.float32
    assert not np.isnan(np.asarray(out, np.float32)).any()
    assert out.shape == want_out.shape and new_state.shape == want_state.shape
    assert_close("out", out, want_out, dtype)
    assert_close("state", new_state, want_state, jnp.float32)


def test_steps_reproduce_the_selective_scan(rng):
    """Mamba-1: stepping from a zero state through L positions gives the scan's outputs and last state."""
    batch, seqlen, dim, dstate = 2, 9, 6, 4
    u, delta, z = (jnp.asarray(rng.normal(size=(batch, seqlen, dim)), jnp.float32) for _ in range(3))
    A = jnp.asarray(-np.exp(rng.uniform(-2, 1, (dim, dstate))), jnp.float32)
    B, C = (jnp.asarray(rng.normal(size=(batch, seqlen, 1, dstate)), jnp.float32) for _ in range(2))
    D, bias = jnp.asarray(rng.normal(size=dim), jnp.float32), jnp.asarray(rng.normal(-1, 0.5, dim), jnp.float32)
    want, want_last = selective_scan_fn(
        u, delta, A, B, C, D, z, delta_bias=bias, delta_softplus=True, return_last_state=True
    )
    state, outs = jnp.zeros((batch, dim, dstate)), []
    for t in range(seqlen):
        out, state = selective_state_update(
            state, u[:, t], delta[:, t], A, B[:, t, 0], C[:, t, 0], D, z[:, t], bias, dt_softplus=True
        )
        outs.append(out)
    assert_close("out", jnp.stack(outs, 1), want, jnp.float32)
    assert_close("last state", state, want_last, jnp.float32)


def test_step_continues_the_chunked_ssd(rng):
    """Mamba-2: the SSD over L positions, then one step from its final state, equals the SSD over L + 1 positions
    (output at the new position and final state), with groups and per-head dims broadcast as the layer does."""
    batch, seqlen, nheads, headdim, dstate, groups = 2, 13, 4, 8, 6, 2
    x = jnp.asarray(rng.normal(size=(batch, seqlen + 1, nheads, headdim)), jnp.float32)
    dt = jnp.asarray(rng.normal(-1, 1, (batch, seqlen + 1, nheads)), jnp.float32)
    A = jnp.asarray(-np.exp(rng.uniform(-2, 1, nheads)), jnp.float32)
    B, C = (jnp.asarray(rng.normal(size=(batch, seqlen + 1, groups, dstate)), jnp.float32) for _ in range(2))
    D, dt_bias = jnp.asarray(rng.normal(size=nheads), jnp.float32), jnp.asarray(rng.normal(size=nheads), jnp.float32)
    args = dict(D=D, dt_bias=dt_bias, dt_softplus=True, return_final_states=True)
    want, want_final = mamba_chunk_scan_combined(x, dt, A, B, C, 4, **args)
    _, state = mamba_chunk_scan_combined(x[:, :-1], dt[:, :-1], A, B[:, :-1], C[:, :-1], 4, **args)
    per_dim = lambda v: jnp.broadcast_to(v[..., None], (*v.shape, headdim))  # noqa: E731
    out, new_state = selective_state_update(
        state, x[:, -1], per_dim(dt[:, -1]), jnp.broadcast_to(A[:, None, None], (nheads, headdim, dstate)),
        B[:, -1], C[:, -1], per_dim(D), dt_bias=per_dim(dt_bias), dt_softplus=True,
    )  # fmt: skip
    assert_close("out", out, want[:, -1], jnp.float32)
    assert_close("final state", new_state, want_final, jnp.float32)


def test_argument_checks():
    state, x, A, B = jnp.zeros((2, 8, 4)), jnp.zeros((2, 8)), jnp.zeros((8, 4)), jnp.zeros((2, 4))
    with pytest.raises(ValueError, match=r"x must have shape \(batch, dim\) = \(2, 8\)"):
        selective_state_update(state, x[:, :3], x, A, B, B)
    with pytest.raises(ValueError, match=r"A must have shape \(dim, N\)"):
        selective_state_update(state, x, x, A[:, :3], B, B)
    with pytest.raises(ValueError, match=r"B must have shape \(batch, N\)"):
        selective_state_update(state, x, x, A, B[:, :3], B)
    with pytest.raises(ValueError, match=r"D must have shape \(dim,\)"):
        selective_state_update(state, x, x, A, B, B, D=jnp.zeros(7))
    heads = jnp.zeros((2, 4, 8, 4))
    with pytest.raises(ValueError, match=r"ngroups \(B.shape\[1\]\)=3 must be positive and divide nheads"):
        selective_state_update(
            heads, heads[..., 0], heads[..., 0], heads[0], jnp.zeros((2, 3, 4)), jnp.zeros((2, 3, 4))
        )
    with pytest.raises(ValueError, match="state must have rank 3 or 4"):
        selective_state_update(jnp.zeros((2, 8)), x, x, A, B, B)
    with pytest.raises(ValueError, match="impl must be one of"):
        selective_state_update(state, x, x, A, B, B, impl="triton")
    with pytest.raises(ValueError, match="block_p must be a positive power of two"):
        selective_state_update(state, x, x, A, B, B, impl="pallas", config=StateUpdateConfig(block_p=6))
    assert jax.jit(selective_state_update)(state, x, x, A, B, B)[0].shape == (2, 8)


@pytest.mark.parametrize("impl", ["reference", "pallas"])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1), (2, 4, 20, 16, 2), (3, 6, 33, 7, 1)])
def test_values_per_head_equal_their_broadcast(rng, impl, shape):
    """Mamba-2's per-head dt, A, D and dt_bias as size-1 axes give what their broadcast over the head dims gives;
    several head-dim blocks (block_p 16) with a partial last one, N not a power of two."""
    batch, nheads, dim, dstate, groups = shape
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    state, x, z = f(batch, nheads, dim, dstate), f(batch, nheads, dim), f(batch, nheads, dim)
    dt, A, D, bias = f(batch, nheads, 1), -jnp.exp(f(nheads, 1, 1)), f(nheads, 1), f(nheads, 1)
    B, C = f(batch, groups, dstate), f(batch, groups, dstate)
    wide = lambda v, s: jnp.broadcast_to(v, s)  # noqa: E731
    got = selective_state_update(state, x, dt, A, B, C, D, z, bias, True, impl=impl)
    want = selective_state_update(
        state, x, wide(dt, x.shape), wide(A, state.shape[1:]), B, C, wide(D, x.shape[1:]), z,
        wide(bias, x.shape[1:]), True,
    )  # fmt: skip
    for name, a, b in zip(("out", "state"), got, want, strict=True):
        assert_close(name, a, b, jnp.float32)


def test_pallas_gradients_equal_the_reference(rng):
    f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)  # noqa: E731
    args = (f(2, 4, 5, 3), f(2, 4, 5), f(2, 4, 5), -jnp.exp(f(4, 5, 3)), f(2, 2, 3), f(2, 2, 3), f(4, 5), f(2, 4, 5))
    cot = (f(2, 4, 5), f(2, 4, 5, 3))

    def grads(impl):
        _, vjp = jax.vjp(lambda *a: selective_state_update(*a, dt_softplus=True, impl=impl), *args)
        return vjp(cot)

    names = ("state", "x", "dt", "A", "B", "C", "D", "z")
    for name, a, b in zip(names, grads("pallas"), grads("reference"), strict=True):
        assert_close(f"d{name}", a, b, jnp.float32)


MOSAIC = StateUpdateConfig(backend="mosaic_gpu")


@pytest.mark.parametrize(
    "heads,per_head,state_dtype,optional",
    [
        (True, True, jnp.float32, True),  # Mamba-2: dt, A, D and dt_bias one value a head; two groups
        (True, False, jnp.bfloat16, False),  # a (H, P, N) A, a 16-bit state
        (False, False, jnp.float32, True),  # Mamba-1: no heads, A (dim, N), two 64-row tiles of dim
    ],
)
def test_mosaic_gpu_kernel_matches_float64(rng, heads, per_head, state_dtype, optional):
    """The Mosaic GPU step kernel (``backend="mosaic_gpu"``, interpreted; outputs NaN before it runs) against the
    float64 step, on bfloat16 x, dt, z, B and C."""
    batch, nheads, dim, dstate, groups = (3, 4, 64, 24, 2) if heads else (2, 1, 128, 8, 1)
    bf16 = jnp.bfloat16
    cast = lambda v, d=bf16: None if v is None else jnp.asarray(v, d)  # noqa: E731
    state = cast(rng.normal(size=(batch, nheads, dim, dstate)), state_dtype)
    x, z = (cast(rng.normal(size=(batch, nheads, dim))) for _ in range(2))
    dt = cast(rng.normal(size=(batch, nheads, 1 if per_head else dim)))
    A = cast(-np.exp(rng.uniform(-2, 1, (nheads, 1, 1) if per_head else (nheads, dim, dstate))), jnp.float32)
    B, C = (cast(rng.normal(size=(batch, groups, dstate))) for _ in range(2))
    per_dim = (nheads, 1) if per_head else (nheads, dim)
    D, dt_bias = cast(rng.normal(size=per_dim), jnp.float32), cast(rng.normal(-1, 0.5, per_dim), jnp.float32)
    if not optional:
        D = z = dt_bias = None
    want_out, want_state = numpy_step(state, x, dt, A, B, C, D, z, dt_bias, optional)
    if not heads:
        state, x, dt, z, B, C = (None if v is None else v[:, 0] for v in (state, x, dt, z, B, C))
        A, D, dt_bias = (None if v is None else v[0] for v in (A, D, dt_bias))
        want_out, want_state = want_out[:, 0], want_state[:, 0]
    step = jax.jit(lambda *a: selective_state_update(*a, dt_softplus=optional, impl="pallas", config=MOSAIC))
    out, new_state = step(state, x, dt, A, B, C, D, z, dt_bias)
    assert out.dtype == bf16 and new_state.dtype == state_dtype
    assert_close("out", out, want_out, bf16)
    assert_close("state", new_state, want_state, state_dtype)


def test_mosaic_gpu_kernel_refuses_what_it_does_not_tile():
    """Head dims not in 64-row tiles or N not in 8-column tiles: a clear error before any work."""
    state, x, A, B = jnp.zeros((2, 96, 16)), jnp.zeros((2, 96)), jnp.zeros((96, 16)), jnp.zeros((2, 16))
    with pytest.raises(ValueError, match=r"head dims \(P = 96\) must be a multiple of 64"):
        selective_state_update(state, x, x, A, B, B, impl="pallas", config=MOSAIC)
    with pytest.raises(ValueError, match=r"N \(= 4\)"):
        selective_state_update(
            state[:, :64, :4], x[:, :64], x[:, :64], A[:64, :4], B[:, :4], B[:, :4], impl="pallas", config=MOSAIC
        )
    with pytest.raises(ValueError, match="backend must be one of"):
        selective_state_update(state, x, x, A, B, B, impl="pallas", config=StateUpdateConfig(backend="cuda"))
