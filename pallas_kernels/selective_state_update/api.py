"""Public selective state update: mamba-ssm's ``selective_state_update`` names, argument order and shapes."""

import jax

from pallas_kernels._checks import check_array, check_config, check_divides, check_impl, check_shape
from pallas_kernels._triton import interpret_mode
from pallas_kernels.selective_state_update import dispatch, reference, vjp
from pallas_kernels.selective_state_update.config import StateUpdateConfig

_AVAILABLE_IMPLS = ("reference", "pallas")


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
    config: StateUpdateConfig | None = None,
) -> tuple[jax.Array, jax.Array]:
    """One recurrent step of the selective SSM for every batch row: the decoding counterpart of
    ``selective_scan_fn`` (Mamba-1) and ``mamba_chunk_scan_combined`` (Mamba-2).

    dt <- softplus(dt + dt_bias) (softplus only with ``dt_softplus``); state <- exp(dt A) state + dt B x;
    out = C . state + D x, times silu(z) when z is given.

    Shapes, Mamba-1 (no heads): state (batch, dim, N); x, dt, z (batch, dim); A (dim, N); B, C (batch, N);
    D, dt_bias (dim,). Mamba-2: state (batch, H, dim, N); x, dt, z (batch, H, dim); A (H, dim, N);
    B, C (batch, G, N) with G dividing H (head h reads group h // (H / G)); D, dt_bias (H, dim). With heads, values
    shared by a head's dims may come once per head, as size-1 axes (what mamba-ssm reads through stride-0 views):
    dt (batch, H, 1), A (H, 1, 1), D and dt_bias (H, 1).

    Unlike mamba-ssm's in-place kernel, this returns ``(out, new_state)``: out with x's dtype and shape, new_state
    with state's dtype and shape (float32 in the models). Arithmetic is float32.
    ``impl``: "reference" (pure JAX; XLA fuses the step into a few kernels, which read the new state twice) or
    "pallas" (one kernel that reads and writes each state element once; interpreted when JAX has no GPU).
    ``config`` chooses it (``backend``) and its tiling: the Triton kernel (the default; the new state in the old
    one's buffer where XLA can donate it) or the Mosaic GPU step kernel (``backend="mosaic_gpu"``: P, the dim of
    the Mamba-1 layout, a multiple of 64 and N of 8, on Hopper).
    """
    check_impl("selective_state_update", impl, _AVAILABLE_IMPLS)
    check_config(config, StateUpdateConfig)
    check_array("state", state, (3, 4))
    heads = state.ndim == 4
    _check(state, x, dt, A, B, C, D, z, dt_bias, heads)
    if not heads:
        per_row = lambda v: None if v is None else v[:, None]  # noqa: E731  (batch, ...) -> (batch, 1, ...)
        per_channel = lambda v: None if v is None else v[None]  # noqa: E731  (dim, ...) -> (1, dim, ...)
        state, x, dt, B, C, z = map(per_row, (state, x, dt, B, C, z))
        A, D, dt_bias = map(per_channel, (A, D, dt_bias))
    if impl == "pallas":
        config = config or StateUpdateConfig()
        if config.backend == "mosaic_gpu":
            refusal = dispatch.mosaic_refusal(state.shape[-2], state.shape[-1], interpret_mode())
            if refusal is not None:
                raise ValueError(f"selective_state_update: StateUpdateConfig(backend='mosaic_gpu'): {refusal}")
        args = (state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, config, interpret_mode())
        out, new_state = vjp.selective_state_update(*args)
    else:
        out, new_state = reference.selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus)
    return (out, new_state) if heads else (out[:, 0], new_state[:, 0])


def _check(state, x, dt, A, B, C, D, z, dt_bias, heads: bool) -> None:
    """Every shape against state's, in the caller's layout (with or without the heads axis)."""
    batch, dstate = state.shape[0], state.shape[-1]
    head_dims = state.shape[1:-1]  # (H, dim) or (dim,)
    names = "(H, dim)" if heads else "(dim,)"
    per_head = (head_dims[0], 1) if heads else None  # a value per head, shared by its dims
    for name, value in (("x", x), ("dt", dt), ("z", z)):
        if value is not None:
            check_array(name, value, state.ndim - 1)
            if not (name == "dt" and heads and tuple(value.shape) == (batch, *per_head)):
                check_shape(name, value, (batch, *head_dims), f"(batch, {names[1:-1].rstrip(',')})")
    check_array("A", A, state.ndim - 1)
    if not (heads and tuple(A.shape) == (*per_head, 1)):
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
            if not (heads and tuple(value.shape) == per_head):
                check_shape(name, value, head_dims, names)
