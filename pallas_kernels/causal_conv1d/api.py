"""Public depthwise causal conv1d: causal-conv1d's ``causal_conv1d_fn`` names and semantics."""

from typing import Literal

import jax
import jax.numpy as jnp

from pallas_kernels._checks import check_array, check_config, check_impl, check_seq_idx, check_shape
from pallas_kernels._triton import interpret_mode
from pallas_kernels.causal_conv1d import dispatch, reference, vjp
from pallas_kernels.causal_conv1d.config import ConvConfig

_AVAILABLE_IMPLS = ("reference", "pallas")
_ACTIVATIONS = (None, "silu", "swish")


def causal_conv1d_fn(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    *,
    seq_idx: jax.Array | None = None,
    initial_states: jax.Array | None = None,
    return_final_states: bool = False,
    activation: str | None = None,
    layout: Literal["channels_last", "channels_first"] = "channels_last",
    impl: str = "reference",
    config: ConvConfig | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Depthwise causal conv: out[t] = act(bias + sum_k weight[:, k] * x[t - (width - 1) + k]).

    Layouts: ``channels_last`` (the Flax models'): x (batch, L, dim), initial/final states (batch, width - 1, dim);
    ``channels_first`` (causal-conv1d's): x (batch, dim, L), states (batch, dim, width - 1).
    weight (dim, width); bias (dim,); activation None, "silu" or "swish"; seq_idx int (batch, L) non-decreasing:
    taps never cross a change of seq_idx (packed sequences). seq_idx cannot be combined with initial_states or
    return_final_states (as in causal-conv1d). Arguments after ``bias`` are keyword-only.

    Returns out with x's dtype and layout, plus final_states (the last width - 1 inputs) if return_final_states.

    ``impl="pallas"`` runs the Pallas kernels (interpreted when JAX has no GPU), SiLU fused, initial states read in
    place (context parallelism passes the previous device's last inputs), a backward that keeps only the inputs.
    ``config`` sets their backends (by default Mosaic GPU's where they cover the call, else Triton's:
    ``causal_conv1d.dispatch``) and tiling (``ConvConfig``).
    """
    check_impl("causal_conv1d_fn", impl, _AVAILABLE_IMPLS)
    if layout not in ("channels_last", "channels_first"):
        raise ValueError(f"layout must be 'channels_last' or 'channels_first', got {layout!r}")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {activation!r}")
    check_array("x", x, 3)
    channels_first = layout == "channels_first"
    if channels_first:
        x = jnp.swapaxes(x, 1, 2)
    batch, seqlen, dim = x.shape
    check_array("weight", weight, 2)
    if weight.shape[0] != dim or weight.shape[1] < 1:
        raise ValueError(f"weight must have shape (dim, width) with dim={dim}, got {tuple(weight.shape)}")
    width = weight.shape[1]
    if bias is not None:
        check_array("bias", bias, 1)
        check_shape("bias", bias, (dim,), "(dim,)")
    if seq_idx is not None:
        if initial_states is not None or return_final_states:
            raise ValueError("seq_idx cannot be combined with initial_states or return_final_states")
        check_seq_idx(seq_idx, batch, seqlen)
    if initial_states is not None:
        check_array("initial_states", initial_states, 3)
        if channels_first:
            check_shape("initial_states", initial_states, (batch, dim, width - 1), "(batch, dim, width - 1)")
            initial_states = jnp.swapaxes(initial_states, 1, 2)
        else:
            check_shape("initial_states", initial_states, (batch, width - 1, dim), "(batch, width - 1, dim)")

    if impl == "pallas":
        check_config(config, ConvConfig)
        interpret = interpret_mode()
        config = dispatch.choose_backends(x.shape, width, seq_idx is not None, config or ConvConfig(), interpret)
        silu = activation in ("silu", "swish")
        states = None if initial_states is None else initial_states.astype(x.dtype)  # as the reference rounds them
        out = vjp.causal_conv1d(x, weight, bias, seq_idx, states, silu, config, interpret)
        final_states = _last_inputs(x, initial_states, width) if return_final_states else None
    else:
        out, final_states = reference.causal_conv1d(x, weight, bias, seq_idx, initial_states, activation)
    if channels_first:
        out = jnp.swapaxes(out, 1, 2)
        final_states = None if final_states is None else jnp.swapaxes(final_states, 1, 2)
    return (out, final_states) if return_final_states else out


def _last_inputs(x: jax.Array, initial_states: jax.Array | None, width: int) -> jax.Array:
    """The width - 1 inputs before the step after x (batch, width - 1, dim) in x's dtype: x's last ones, preceded by
    the initial states' (zeros without them) where x is shorter."""
    batch, seqlen, dim = x.shape
    if seqlen >= width - 1:
        return x[:, seqlen - (width - 1) :]
    history = jnp.zeros((batch, width - 1, dim), x.dtype) if initial_states is None else initial_states.astype(x.dtype)
    return jnp.concatenate([history, x], axis=1)[:, seqlen:]
