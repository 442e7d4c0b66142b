"""Public chunked SSD (Mamba-2): mamba-ssm's ``mamba_chunk_scan_combined`` names, argument order and semantics."""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from pallas_kernels._checks import (
    check_array,
    check_config,
    check_cu_seqlens,
    check_divides,
    check_impl,
    check_positive_int,
    check_seq_idx,
    check_shape,
)
from pallas_kernels._triton import (
    gpu_compute_capability,
    gpu_has_wgmma,
    gpu_sm_count,
    interpret_mode,
    interpreted_warpgroups,
)
from pallas_kernels.ssd import reference, vjp
from pallas_kernels.ssd.config import MAX_DSTATE, MAX_HEADDIM, SsdConfig
from pallas_kernels.ssd.dims import ssd_dims
from pallas_kernels.ssd.heuristics import (
    PROGRAM_RESERVED_BYTES,
    SM_SHARED_BYTES,
    WALK_WARPGROUPS,
    default_config,
    keeping_states_every,
    walk_pieces_fit,
    walk_programs_per_sm,
    walk_shared_bytes,
)

_AVAILABLE_IMPLS = ("reference", "pallas")
SAVED_STATES_NAME = vjp.STATES_NAME  # what a jax.checkpoint policy names to keep the Pallas SSD's states
MAMBA_SSM_TRITON = "mamba_ssm_triton"  # mamba-ssm's Triton kernels from JAX: registered by torch_reference
_REGISTERED: dict[str, Callable] = {}


def register_impl(impl: str, fn: Callable) -> None:
    """Make ``impl`` an implementation from outside this package (which imports no torch): ``fn(x, dt, A, B, C,
    chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit, return_final_states)`` -> out, or
    (out, final_states) with ``return_final_states``, called after this module has checked the arguments;
    differentiable if ``fn`` is. ``torch_reference.ssd_jax_triton`` registers ``"mamba_ssm_triton"``."""
    if impl in _AVAILABLE_IMPLS:
        raise ValueError(f"impl {impl!r} is built in and cannot be registered")
    _REGISTERED[impl] = fn


def registered_impls() -> tuple[str, ...]:
    """The impls registered from outside this package in this process."""
    return tuple(_REGISTERED)


def pallas_config(
    batch: int, seqlen: int, nheads: int, headdim: int, dstate: int, dtype, ngroups: int = 1
) -> SsdConfig:
    """The tiling ``impl="pallas"`` uses when given no ``config``: ``default_config`` for these sizes, the inputs'
    dtype, this GPU's SM count, whether it has Hopper's ``wgmma`` and, interpreted, the warpgroups a Mosaic walk
    program can have with the interpreter's threads (``interpreted_warpgroups``)."""
    itemsize = jnp.dtype(dtype).itemsize
    most = interpreted_warpgroups()
    warpgroups = WALK_WARPGROUPS if most is None else min(WALK_WARPGROUPS, most)
    return default_config(
        *(batch, seqlen, nheads, headdim, dstate, itemsize, gpu_sm_count()),
        ngroups=ngroups,
        wgmma=gpu_has_wgmma(),
        walk_warpgroups=warpgroups,
    )


@jax.named_scope("ssd")  # the op's XLA-side work is attributed to it in profiles
def ssd_final_state(
    x: jax.Array,
    dt: jax.Array,
    A: jax.Array,
    B: jax.Array,
    dt_bias: jax.Array | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> jax.Array:
    """The final state ``mamba_chunk_scan_combined(..., return_final_states=True)`` returns from a zero initial
    state, without computing the outputs (pure JAX, differentiable): what a stretch of a sequence hands the next one
    (context parallelism), at about one read of x and B instead of a whole scan forward and backward.

    Same layout and dt processing as ``mamba_chunk_scan_combined``: x (batch, L, H, P); dt (batch, L, H); A (H,)
    float32; B (batch, L, G, N), head h reads group h // (H // G); dt_bias (H,). Returns (batch, H, P, N) float32.
    C, D and z do not enter the state, and packed sequences (seq_idx) are not taken."""
    _check_state_inputs(x, dt, A, B, dt_bias, dt_limit)
    processed = reference.process_dt(dt, dt_bias, bool(dt_softplus), (float(dt_limit[0]), float(dt_limit[1])))
    return reference.final_state(x, processed, A, B)


def _check_state_inputs(x, dt, A, B, dt_bias, dt_limit) -> tuple[int, ...]:
    """The checks of the arguments that make the state (shared by both public functions); x's shape."""
    check_array("x", x, 4)
    batch, seqlen, nheads, _ = x.shape
    check_array("dt", dt, 3)
    check_shape("dt", dt, (batch, seqlen, nheads), "(batch, L, H)")
    check_array("A", A, 1)
    check_shape("A", A, (nheads,), "(H,)")
    if A.dtype != jnp.float32:
        raise ValueError(f"A must be float32, got {A.dtype}")
    check_array("B", B, 4)
    if B.shape[:2] != (batch, seqlen):
        raise ValueError(f"B must have shape (batch, L, G, N) with batch={batch}, L={seqlen}, got {tuple(B.shape)}")
    check_divides("B groups (G)", nheads, B.shape[2], "H")
    if dt_bias is not None:
        check_array("dt_bias", dt_bias, 1)
        check_shape("dt_bias", dt_bias, (nheads,), "(H,)")
    if len(dt_limit) != 2 or not dt_limit[0] <= dt_limit[1]:
        raise ValueError(f"dt_limit must be a pair (min, max) with min <= max, got {dt_limit!r}")
    return tuple(x.shape)


@jax.named_scope("ssd")  # the op's XLA-side work is attributed to it in profiles
def mamba_chunk_scan_combined(
    x: jax.Array,
    dt: jax.Array,
    A: jax.Array,
    B: jax.Array,
    C: jax.Array,
    chunk_size: int,
    D: jax.Array | None = None,
    z: jax.Array | None = None,
    dt_bias: jax.Array | None = None,
    initial_states: jax.Array | None = None,
    seq_idx: jax.Array | None = None,
    cu_seqlens: jax.Array | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    return_final_states: bool = False,
    return_varlen_states: bool = False,
    *,
    impl: str = "reference",
    config: SsdConfig | None = None,
    checkpoint_every: int | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """SSD scan, per head h: state_t = exp(dt_t A_h) state_{t-1} + dt_t x_t ⊗ B_t,  y_t = state_t C_t + D x_t.

    dt is first shifted by ``dt_bias``, passed through softplus if ``dt_softplus`` and clamped to ``dt_limit``
    (always, so without softplus negative dt become 0, as in mamba-ssm). ``out = y * silu(z)`` if z is given.

    Layout (channels last, no transposes): x, z (batch, L, H, P); dt (batch, L, H); A (H,) float32;
    B, C (batch, L, G, N), head h reads group h // (H // G); D (H,) or (H, P); dt_bias (H,);
    initial_states (batch, H, P, N); seq_idx int (batch, L), non-decreasing: packed sequences, the state resets
    where it changes, and ``initial_states`` applies to sequence 0 only (as in mamba-ssm).

    Returns out (batch, L, H, P) in x's dtype; then final_states (batch, H, P, N) float32 if
    ``return_final_states``; then, if ``return_varlen_states``, varlen_states (num_sequences, H, P, N) float32: the
    state right after each packed sequence's last position ``cu_seqlens[i + 1] - 1``, for batch 1 and cu_seqlens int
    (num_sequences + 1,) strictly increasing from 0 to L (as mamba-ssm, which uses cu_seqlens only for this and
    ignores it otherwise). The state resets only where seq_idx says: pass seq_idx marking the same sequences (as
    mamba-ssm's Mamba2 does) and each row is that sequence's own final state, the one a separate run of it returns
    (mamba-ssm's kernel, unlike this, drops ``initial_states`` from sequence 0's row when that sequence ends inside
    the first chunk). varlen_states are computed in XLA from the chunk states whatever ``impl`` is, and are
    differentiable. Chunking changes only the float rounding, never the result's meaning.

    ``impl="mamba_ssm_triton"`` (after ``import torch_reference.ssd_jax_triton``; GPU only) launches mamba-ssm's
    own Triton kernels, forward and backward, from JAX: for benchmarks that separate the kernel from the framework.

    ``impl="pallas"`` runs the Pallas Triton kernels (interpreted when JAX has no GPU) for headdim <= 128 and
    N <= 256. They walk time in blocks of ``config.block_l`` (``SsdConfig``, default 64) whatever ``chunk_size``
    is: like mamba-ssm's chunk size, that block changes rounding only. Dot operands take x's dtype (bf16 in
    training, as mamba-ssm's kernels), accumulation and the state are float32. ``checkpoint_every`` sets only the
    default tiling's positions between the states the forward keeps for the backward (None: its own choice, every
    block's state while a call's are under 256 MiB; 0: every block's; else a multiple of 64, rebuilt in the backward
    from float32 states kept that often: less memory, one more pass); it has no effect on the other impls.
    """
    if impl == MAMBA_SSM_TRITON and impl not in _REGISTERED:
        raise NotImplementedError(
            f"impl={impl!r} needs `import torch_reference.ssd_jax_triton` first (mamba-ssm, jax-triton and a GPU)"
        )
    if impl not in _REGISTERED:
        check_impl("mamba_chunk_scan_combined", impl, _AVAILABLE_IMPLS)
    batch, seqlen, nheads, headdim = _check_state_inputs(x, dt, A, B, dt_bias, dt_limit)
    check_positive_int("chunk_size", chunk_size)
    check_array("C", C, 4)
    check_shape("C", C, B.shape, "(batch, L, G, N) like B")
    if D is not None:
        check_array("D", D, (1, 2))
        if tuple(D.shape) not in ((nheads,), (nheads, headdim)):
            raise ValueError(f"D must have shape (H,) = ({nheads},) or (H, P) = {(nheads, headdim)}, got {D.shape}")
    if z is not None:
        check_array("z", z, 4)
        check_shape("z", z, x.shape, "(batch, L, H, P) like x")
    if initial_states is not None:
        check_array("initial_states", initial_states, 4)
        check_shape("initial_states", initial_states, (batch, nheads, headdim, B.shape[3]), "(batch, H, P, N)")
    if seq_idx is not None:
        check_seq_idx(seq_idx, batch, seqlen)
    if return_varlen_states:
        check_cu_seqlens(cu_seqlens, batch, seqlen)
    if checkpoint_every is not None:
        if config is not None:
            raise ValueError("pass either config or checkpoint_every (SsdConfig.checkpoint_every), not both")
        block = SsdConfig.block_l  # the default tiling's block (default_config keeps it)
        if not isinstance(checkpoint_every, int) or checkpoint_every < 0 or checkpoint_every % block:
            raise ValueError(f"checkpoint_every must be None, 0 or a multiple of {block} > 0, got {checkpoint_every}")

    out, final_states = _scan(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit,
        return_final_states, impl, config, checkpoint_every,
    )  # fmt: skip
    results = (out, final_states) if return_final_states else (out,)
    if return_varlen_states:
        processed_dt = reference.process_dt(dt, dt_bias, bool(dt_softplus), (float(dt_limit[0]), float(dt_limit[1])))
        states = reference.varlen_states(x, processed_dt, A, B, cu_seqlens, int(chunk_size), initial_states, seq_idx)
        results += (states,)
    return results[0] if len(results) == 1 else results


def _scan(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit,
          return_final_states, impl, config, checkpoint_every=None):  # fmt: skip
    """(out, final_states) of the checked arguments by ``impl``; a registered impl is asked for the final states
    only with ``return_final_states`` (None otherwise)."""
    nheads, headdim = x.shape[2:]
    if impl in _REGISTERED:
        result = _REGISTERED[impl](
            x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit,
            return_final_states,
        )  # fmt: skip
        return result if return_final_states else (result, None)

    if impl == "pallas":
        _check_pallas_supported(headdim, B.shape[3], config)
        if config is None:
            config = pallas_config(*x.shape, B.shape[3], x.dtype, B.shape[2])
            if checkpoint_every is not None:
                config = keeping_states_every(config, checkpoint_every)
        dims = ssd_dims(
            x,
            B,
            D,
            z,
            dt_bias,
            initial_states,
            seq_idx,
            dt_softplus,
            dt_limit,
            config.block_l,
            config.block_p,
            interpret_mode(),
            config.checkpoint_every,
            config.shared_scores,
        )
        D_heads = None if D is None else jnp.broadcast_to(D.reshape(nheads, -1), (nheads, headdim)).astype(jnp.float32)
        seq = None if seq_idx is None else seq_idx.astype(jnp.int32)
        init = None if initial_states is None else initial_states.astype(jnp.float32)
        B, C = B.astype(x.dtype), C.astype(x.dtype)  # the dots take one operand dtype
        return vjp.ssd(x, dt, A, B, C, D_heads, z, dt_bias, init, seq, dims, config)

    return reference.chunk_scan(
        x,
        dt,
        A,
        B,
        C,
        int(chunk_size),
        D,
        z,
        dt_bias,
        initial_states,
        seq_idx,
        bool(dt_softplus),
        (float(dt_limit[0]), float(dt_limit[1])),
    )


def _check_pallas_supported(headdim: int, dstate: int, config: SsdConfig | None) -> None:
    """What the Pallas kernels do not tile is refused up front rather than computed slowly or wrongly."""
    if headdim > MAX_HEADDIM:
        raise ValueError(f"impl='pallas' supports headdim (x.shape[3]) up to {MAX_HEADDIM}, got {headdim}")
    if dstate > MAX_DSTATE:
        raise ValueError(f"impl='pallas' supports N (B.shape[3]) up to {MAX_DSTATE}, got {dstate}")
    check_config(config, SsdConfig)
    switches = ("fwd_mosaic", "states_mosaic", "bwd_dx_mosaic", "bwd_dbc_mosaic")
    mosaic = [name for name in switches if config is not None and getattr(config, name)]
    if mosaic and not gpu_has_wgmma():
        raise ValueError(
            f"SsdConfig.{mosaic[0]} needs a GPU with Hopper's wgmma (compute capability 9.x), this one has "
            f"{gpu_compute_capability()}: set it to False"
        )
    if config is None or not config.fwd_mosaic:
        return
    pieces = config.fwd_walk_pieces
    if config.fwd_walk_warpgroups > 1:
        if pieces > 1:
            raise ValueError(
                f"SsdConfig.fwd_walk_warpgroups={config.fwd_walk_warpgroups} loads B and C in halves itself: set "
                f"fwd_walk_pieces=1, got {pieces}"
            )
        if not walk_pieces_fit(dstate, config.fwd_walk_warpgroups):
            raise ValueError(
                f"SsdConfig.fwd_walk_warpgroups={config.fwd_walk_warpgroups} splits N (B.shape[3]) into halves of a "
                f"multiple of 64 columns, got N={dstate}: use 1"
            )
        most = interpreted_warpgroups()
        if most is not None and config.fwd_walk_warpgroups > most:
            raise ValueError(
                f"SsdConfig.fwd_walk_warpgroups={config.fwd_walk_warpgroups} interpreted needs XLA's CPU pool of at "
                f"least {config.fwd_walk_warpgroups + 1} threads (one a warpgroup and the program's), this process "
                f"has {most + 1}: set PJRT_NPROC={config.fwd_walk_warpgroups + 1} or more before JAX starts, or use 1"
            )
        return
    if pieces > 1 and not walk_pieces_fit(dstate, pieces):
        raise ValueError(
            f"SsdConfig.fwd_walk_pieces={pieces} splits N (B.shape[3]) into pieces of a multiple of 64 columns, got "
            f"N={dstate}: use fewer"
        )
    if pieces == 1 and walk_programs_per_sm(dstate, config.fwd_walk_stages) < 1:
        raise ValueError(
            f"SsdConfig.fwd_walk_stages={config.fwd_walk_stages} needs "
            f"{walk_shared_bytes(dstate, config.fwd_walk_stages) // 1024} KB of shared memory for the forward's "
            f"Mosaic walk at N={dstate}, more than an SM's {(SM_SHARED_BYTES - PROGRAM_RESERVED_BYTES) // 1024}: "
            "use fewer"
        )
