"""Public selective state update: mamba-ssm's ``selective_state_update`` names, argument order and shapes."""

import jax

from pallas_kernels._checks import check_array, check_divides, check_impl, check_shape
from pallas_kernels.selective_state_update import reference

_AVAILABLE_IMPLS = ("reference",)


def selective_state_update(
    state: jax.Array,
    x: jax.Array,
    dt: jax.Array,
    A: jax.Array,
    B: jax.Array,
    C: jax.Array,
    D: jax.Array | None = None,
    z: jax.Array | None = None,
    dt_bias: jax.Array | None = None,
    dt_softplus: bool = False,
    *,
    impl: str = "reference",
) -> tuple[jax.Array, jax.Array]:
    """One recurrent step of the selective SSM for every batch row: the decoding counterpart of
    ``selective_scan_fn`` (Mamba-1) and ``mamba_chunk_scan_combined`` (Mamba-2).

    dt <- softplus(dt + dt_bias) (softplus only with ``dt_softplus``); state <- exp(dt A) state + dt B x;
    out = C . state + D x, times silu(z) when z is given.

    Shapes, Mamba-1 (no heads): state (batch, dim, N); x, dt, z (batch, dim); A (dim, N); B, C (batch, N);
    D, dt_bias (dim,). Mamba-2: state (batch, H, dim, N); x, dt, z (batch, H, dim); A (H, dim, N);
    B, C (batch, G, N) with G dividing H (head h reads group h // (H / G)); D, dt_bias (H, dim). Mamba-2 layers
    broadcast their per-head dt, A, D and dt_bias over dim (``jnp.broadcast_to``, free under jit).

    Unlike mamba-ssm's in-place kernel, this returns ``(out, new_state)``: out with x's dtype and shape, new_state
    with state's dtype and shape (float32 in the models). Arithmetic is float32.
    ``impl``: "reference" (pure JAX; XLA fuses the step into a few kernels).
    """
    check_impl("selective_state_update", impl, _AVAILABLE_IMPLS)
    check_array("state", state, (3, 4))
    heads = state.ndim == 4
    _check(state, x, dt, A, B, C, D, z, dt_bias, heads)
    if heads:
        return reference.selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus)
    per_row = lambda v: None if v is None else v[:, None]  # noqa: E731  (batch, ...) -> (batch, 1, ...)
    per_channel = lambda v: None if v is None else v[None]  # noqa: E731  (dim, ...) -> (1, dim, ...)
    out, new_state = reference.selective_state_update(
        per_row(state), per_row(x), per_row(dt), per_channel(A), per_row(B), per_row(C),
        per_channel(D), per_row(z), per_channel(dt_bias), dt_softplus,
    )  # fmt: skip
    return out[:, 0], new_state[:, 0]


def _check(state, x, dt, A, B, C, D, z, dt_bias, heads: bool) -> None:
    """Every shape against state's, in the caller's layout (with or without the heads axis)."""
    batch, dstate = state.shape[0], state.shape[-1]
    head_dims = state.shape[1:-1]  # (H, dim) or (dim,)
    names = "(H, dim)" if heads else "(dim,)"
    for name, value in (("x", x), ("dt", dt), ("z", z)):
        if value is not None:
            check_array(name, value, state.ndim - 1)
            check_shape(name, value, (batch, *head_dims), f"(batch, {names[1:-1].rstrip(',')})")
    check_array("A", A, state.ndim - 1)
    check_shape("A", A, (*head_dims, dstate), f"({names[1:-1].rstrip(',')}, N)")
    for name, value in (("B", B), ("C", C)):
        check_array(name, value, state.ndim - 1)
        if value.shape[0] != batch or value.shape[-1] != dstate:
            layout = "(batch, G, N)" if heads else "(batch, N)"
            raise ValueError(
                f"{name} must have shape {layout} with batch={batch}, N={dstate}, got {tuple(value.shape)}"
            )
    if heads:
        check_divides("ngroups (B.shape[1])", state.shape[1], B.shape[1], "nheads (state.shape[1])")
    check_shape("C", C, B.shape, "like B")
    for name, value in (("D", D), ("dt_bias", dt_bias)):
        if value is not None:
            check_array(name, value, len(head_dims))
            check_shape(name, value, head_dims, names)
