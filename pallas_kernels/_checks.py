"""Argument checks shared by the ops' public functions.

Every check raises ``ValueError`` naming the offending argument and the expected form, before any work is done.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

FLOAT_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
IMPLS = ("reference", "pallas")


def check_impl(op: str, impl: str, available: Sequence[str]) -> None:
    """Validate the ``impl=`` switch: unknown names are a ValueError, known but unbuilt ones NotImplementedError."""
    if impl not in IMPLS:
        raise ValueError(f"{op}: impl must be one of {IMPLS}, got {impl!r}")
    if impl not in available:
        raise NotImplementedError(f"{op}: impl={impl!r} is not available yet; use one of {tuple(available)}")


def check_array(name: str, x, ndim: int | Sequence[int], *, floating: bool = True) -> None:
    """``x`` must be an array of the given rank(s); floating point unless ``floating=False``."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ValueError(f"{name} must be an array, got {type(x).__name__}")
    ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.ndim not in ranks:
        raise ValueError(f"{name} must have rank {' or '.join(map(str, ranks))}, got shape {tuple(x.shape)}")
    if floating and not any(x.dtype == d for d in FLOAT_DTYPES):
        raise ValueError(f"{name} must be float32, bfloat16 or float16, got {x.dtype}")


def check_shape(name: str, x, expected: tuple, layout: str) -> None:
    """``x.shape`` must equal ``expected``; ``layout`` names the axes in the message, e.g. '(batch, L, dim)'."""
    if tuple(x.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {layout} = {tuple(expected)}, got {tuple(x.shape)}")


def check_positive_int(name: str, value) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_divides(name: str, total: int, part: int, what: str) -> None:
    """``part`` must divide ``total`` (e.g. groups must divide channels)."""
    if part <= 0 or total % part:
        raise ValueError(f"{name}={part} must be positive and divide {what}={total}")


def check_seq_idx(seq_idx, batch: int, seqlen: int) -> None:
    """seq_idx: int (batch, L), non-negative and non-decreasing along L (checked when its values are known)."""
    check_array("seq_idx", seq_idx, 2, floating=False)
    check_shape("seq_idx", seq_idx, (batch, seqlen), "(batch, L)")
    if not jnp.issubdtype(seq_idx.dtype, jnp.integer):
        raise ValueError(f"seq_idx must be an integer array, got {seq_idx.dtype}")
    if isinstance(seq_idx, jax.core.Tracer):
        return
    values = np.asarray(seq_idx)
    if values.size and values.min() < 0:
        raise ValueError("seq_idx must be non-negative (sequence ids 0, 1, 2, ... per row)")
    if values.shape[1] > 1 and np.any(np.diff(values, axis=1) < 0):
        raise ValueError("seq_idx must be non-decreasing along L (packed sequences are contiguous)")


def check_cu_seqlens(cu_seqlens, batch: int, seqlen: int, needed_by: str = "return_varlen_states") -> None:
    """cu_seqlens of packed sequences: int (num_sequences + 1,) strictly increasing from 0 to L (values checked when
    known), with batch 1 (the sequences are packed along L). ``needed_by`` names the argument that asks for them."""
    if cu_seqlens is None:
        raise ValueError(f"{needed_by} needs cu_seqlens: int (num_sequences + 1,), from 0 to L")
    if batch != 1:
        raise ValueError(f"{needed_by} needs batch 1 (sequences packed along L), got batch {batch}")
    check_array("cu_seqlens", cu_seqlens, 1, floating=False)
    if not jnp.issubdtype(cu_seqlens.dtype, jnp.integer) or cu_seqlens.shape[0] < 2:
        raise ValueError(
            f"cu_seqlens must be an integer array (num_sequences + 1,) with at least 2 entries, got "
            f"{cu_seqlens.dtype} {tuple(cu_seqlens.shape)}"
        )
    if isinstance(cu_seqlens, jax.core.Tracer):
        return
    values = np.asarray(cu_seqlens)
    if values[0] != 0 or values[-1] != seqlen or np.any(np.diff(values) <= 0):
        raise ValueError(
            f"cu_seqlens must increase strictly from 0 to L={seqlen} (no empty sequence), got {values.tolist()}"
        )


def check_config(config, config_cls: type) -> None:
    """A kernel tiling: None (the op's default) or a valid instance of the op's config dataclass."""
    if config is None:
        return
    if not isinstance(config, config_cls):
        raise ValueError(f"config must be an instance of {config_cls.__name__}, got {type(config).__name__}")
    config.validate()
