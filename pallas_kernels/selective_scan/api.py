"""Public selective scan (Mamba-1): mamba-ssm's ``selective_scan_fn`` names, argument order and semantics."""

import math
from typing import Literal

import jax
import jax.numpy as jnp

from pallas_kernels._checks import (
    check_array,
    check_config,
    check_divides,
    check_impl,
    check_seq_idx,
    check_shape,
)
from pallas_kernels._triton import gpu_sm_count, interpret_mode
from pallas_kernels.selective_scan import dispatch, reference, vjp
from pallas_kernels.selective_scan.config import MAX_DSTATE, ScanConfig
from pallas_kernels.selective_scan.heuristics import KEEP_EVERY, default_config, mosaic_config

Layout = Literal["channels_last", "channels_first"]
SAVED_STATES_NAME = vjp.STATES_NAME  # what a jax.checkpoint policy names to keep the Pallas scan's states
_AVAILABLE_IMPLS = ("reference", "pallas")
BACKENDS = ("triton", "mosaic_gpu", "auto")


@jax.named_scope("selective_scan")  # the op's XLA-side work is attributed to it in profiles
def selective_scan_fn(
    u: jax.Array,
    delta: jax.Array,
    A: jax.Array,
    B: jax.Array,
    C: jax.Array,
    D: jax.Array | None = None,
    z: jax.Array | None = None,
    delta_bias: jax.Array | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    *,
    layout: Layout = "channels_last",
    impl: str = "reference",
    config: ScanConfig | None = None,
    checkpoint_every: int | None = None,
    backend: str = "triton",
    seq_idx: jax.Array | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Selective scan: h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t,  y_t = C_t h_t + D u_t,  out = y * silu(z).

    delta is first shifted by ``delta_bias`` and passed through softplus if ``delta_softplus``.

    Layouts (G groups of channels; channel d reads group d // (dim // G)):
      - ``channels_last`` (the Flax models' layout, no transposes): u, delta, z (batch, L, dim);
        B, C (batch, L, G, N), (batch, L, N) for G = 1, or time-invariant (dim, N).
      - ``channels_first`` (mamba-ssm's layout): u, delta, z (batch, dim, L); B, C (batch, G, N, L),
        (batch, N, L) or (dim, N). Costs a transpose in and out.
    A: (dim, N) float32 (negative for a decaying state). D, delta_bias: (dim,).

    Returns out with u's dtype and u's layout, plus the float32 last state (batch, dim, N) if ``return_last_state``.
    State and arithmetic are float32 whatever the input dtype.

    ``impl="pallas"`` runs the Pallas Triton kernels (interpreted when JAX has no GPU); it needs input-dependent
    B and C and N <= 256. ``config`` overrides its design and tiling (``ScanConfig``: the chunked scan along time or
    the sequential walk, per pass); the default is chosen from N, dim and batch x groups (``default_config``).
    ``checkpoint_every`` sets only the default's steps between the states kept for the backward (None: 256; 0:
    every state the backward reads, which spares the backward a rebuild at the cost of (batch, L / 8, N, dim)
    float32 kept per call); it has no effect on ``impl="reference"``.
    ``backend`` chooses the default's kernels: "triton", "mosaic_gpu" (both passes on Mosaic GPU; dim / G a multiple
    of 128, a Hopper GPU; anything else is refused) or "auto" (Mosaic GPU where it takes the call
    and the kernels are compiled, else Triton). The default stays "triton" until the Mosaic GPU kernels have been
    measured against it (``docs/kernels.md#selective-scan-designs``).
    ``seq_idx`` (batch, L) integer: sequences packed along L, the state zeroed before each step whose index differs
    from the step before's, so that each sequence runs as if alone (mamba-ssm's Mamba-1 has no packed sequences; its
    Mamba-2 and causal conv take the same ``seq_idx``). With ``impl="pallas"`` it runs on the Mosaic GPU kernels: the
    default config with ``backend`` "mosaic_gpu" or "auto", or a config with both passes on Mosaic GPU.
    """
    check_impl("selective_scan_fn", impl, _AVAILABLE_IMPLS)
    if layout not in ("channels_last", "channels_first"):
        raise ValueError(f"layout must be 'channels_last' or 'channels_first', got {layout!r}")
    check_array("u", u, 3)
    axes = "(batch, L, dim)" if layout == "channels_last" else "(batch, dim, L)"
    check_array("delta", delta, 3)
    check_shape("delta", delta, u.shape, axes)
    if z is not None:
        check_array("z", z, 3)
        check_shape("z", z, u.shape, axes)
    if layout == "channels_first":
        u, delta, z = (None if t is None else jnp.swapaxes(t, 1, 2) for t in (u, delta, z))
        B, C = (_bc_to_channels_last(name, t) for name, t in (("B", B), ("C", C)))
    batch, seqlen, dim = u.shape
    check_array("A", A, 2)
    if A.dtype != jnp.float32:
        raise ValueError(f"A must be float32, got {A.dtype}")
    if A.shape[0] != dim:
        raise ValueError(f"A must have shape (dim, N) with dim={dim}, got {tuple(A.shape)}")
    dstate = A.shape[1]
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if impl == "pallas":
        _check_pallas_supported(B, C, dstate, config)
        if config is not None and checkpoint_every is not None:
            raise ValueError("pass either config or checkpoint_every (ScanConfig.checkpoint_every), not both")
        if config is not None and backend != "triton":
            raise ValueError("pass either config or backend (ScanConfig.fwd_backend and bwd_backend), not both")
    B = _check_bc("B", B, batch, seqlen, dim, dstate, layout)
    C = _check_bc("C", C, batch, seqlen, dim, dstate, layout)
    if B.shape[2] != C.shape[2]:  # e.g. time-invariant B with input-dependent C: bring both to lcm(G_B, G_C) groups.
        groups = math.lcm(B.shape[2], C.shape[2])
        B, C = (jnp.repeat(t, groups // t.shape[2], axis=2) for t in (B, C))
    for name, vec in (("D", D), ("delta_bias", delta_bias)):
        if vec is not None:
            check_array(name, vec, 1)
            check_shape(name, vec, (dim,), "(dim,)")
    if seq_idx is not None:
        check_seq_idx(seq_idx, batch, seqlen)
    if impl == "pallas":
        groups = B.shape[2]
        if config is None:
            keep = KEEP_EVERY if checkpoint_every is None else checkpoint_every
            config = default_config(dstate, dim // groups, batch * groups, keep, gpu_sm_count())
            if _takes_mosaic(backend, dim, groups, seq_idx is not None):
                config = mosaic_config(config)
            config.validate()
        _check_mosaic_supported(config, dim, groups)
        if seq_idx is not None and not config.fwd_backend == config.bwd_backend == "mosaic_gpu":
            raise ValueError(
                "seq_idx (packed sequences) with impl='pallas' runs on the Mosaic GPU kernels: pass "
                "backend='mosaic_gpu' or 'auto', or a config with fwd_backend and bwd_backend 'mosaic_gpu'"
            )
        keep_mask = None if seq_idx is None else reference.keep_mask(seq_idx)
        out, last_state = vjp.selective_scan(
            u, delta, A, B, C, D, z, delta_bias, keep_mask, bool(delta_softplus), config, interpret_mode()
        )
    else:
        args = (u, delta, A, B, C, D, z, delta_bias, bool(delta_softplus))
        out, last_state = reference.selective_scan(*args, seq_idx=seq_idx)
    if layout == "channels_first":
        out = jnp.swapaxes(out, 1, 2)
    return (out, last_state) if return_last_state else out


def _takes_mosaic(backend: str, dim: int, groups: int, packed: bool) -> bool:
    """Whether ``backend`` puts the default config's passes on Mosaic GPU: "mosaic_gpu" always (a refusal is raised
    later), "auto" where nothing refuses the shape and the kernels are compiled or the sequences packed (which only
    the Mosaic GPU kernels take)."""
    if backend == "auto":
        return (packed or not interpret_mode()) and dispatch.mosaic_refusal(dim, groups) is None
    return backend == "mosaic_gpu"


def _check_mosaic_supported(config: ScanConfig, dim: int, groups: int) -> None:
    """A config that puts a pass on Mosaic GPU where its kernels cannot take the shape raises, naming the fields."""
    mosaic = [name for name in ("fwd_backend", "bwd_backend") if getattr(config, name) == "mosaic_gpu"]
    refusal = dispatch.mosaic_refusal(dim, groups) if mosaic else None
    if refusal:
        raise ValueError(f"ScanConfig({', '.join(mosaic)}='mosaic_gpu'): {refusal}")


def _check_pallas_supported(B: jax.Array, C: jax.Array, dstate: int, config: ScanConfig | None) -> None:
    """What the Pallas kernels do not cover is refused up front rather than computed slowly or wrongly."""
    for name, x in (("B", B), ("C", C)):
        if x.ndim == 2:
            raise ValueError(
                f"impl='pallas' needs input-dependent {name} of shape (batch, L, G, N) or (batch, L, N); "
                f"time-invariant {name} (dim, N) is supported by impl='reference'"
            )
    if dstate > MAX_DSTATE:
        raise ValueError(f"impl='pallas' supports N (A.shape[1]) up to {MAX_DSTATE}, got {dstate}")
    check_config(config, ScanConfig)


def _bc_to_channels_last(name: str, x: jax.Array) -> jax.Array:
    """(batch, G, N, L) -> (batch, L, G, N); (batch, N, L) -> (batch, L, 1, N); (dim, N) unchanged."""
    check_array(name, x, (2, 3, 4))
    if x.ndim == 4:
        return jnp.transpose(x, (0, 3, 1, 2))
    if x.ndim == 3:
        return jnp.transpose(x, (0, 2, 1))[:, :, None, :]
    return x


def _check_bc(name: str, x: jax.Array, batch: int, seqlen: int, dim: int, dstate: int, layout: str) -> jax.Array:
    """Validate B or C and return it as (batch, L, G, N); time-invariant (dim, N) becomes G = dim."""
    check_array(name, x, (2, 3, 4))
    if x.ndim == 2:
        check_shape(name, x, (dim, dstate), "(dim, N)")
        return jnp.broadcast_to(x[None, None], (batch, seqlen, dim, dstate))
    if x.ndim == 3:
        x = x[:, :, None, :]
    if x.shape[0] != batch or x.shape[1] != seqlen or x.shape[3] != dstate:
        expected = "(batch, L, G, N)" if layout == "channels_last" else "(batch, G, N, L)"
        raise ValueError(
            f"{name} must have shape {expected} with batch={batch}, L={seqlen}, N={dstate} (layout={layout}), "
            f"got {tuple(x.shape)} after conversion to (batch, L, G, N)"
        )
    check_divides(f"{name} groups", dim, x.shape[2], "dim")
    return x
