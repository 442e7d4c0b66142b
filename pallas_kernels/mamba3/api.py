"""Public Mamba-3 functions: mamba-ssm's ``mamba3_siso_combined``, ``mamba3_siso_step`` and ``mamba3_mimo`` names,
argument order and layouts, and a MIMO decoding step in the SISO step's form (``mamba3_mimo_step``).

``impl="pallas"`` runs ``mamba3_siso_combined`` and ``mamba3_mimo`` on the Mosaic GPU kernels for 16-bit V, and
the two decoding steps' state update on the step kernel (``dispatch``; interpreted without a GPU)."""

import jax
import numpy as np

from pallas_kernels._checks import (
    check_array,
    check_cu_seqlens,
    check_divides,
    check_impl,
    check_positive_int,
    check_shape,
)
from pallas_kernels.mamba3 import dispatch, reference, vjp

_AVAILABLE_IMPLS = ("reference", "pallas")
# What a jax.checkpoint policy names to keep of the kernels' path (save_only_these_names): the block states the
# backward reads and the kernels' output; the rest (rotations, scales, the correction) is cheap to recompute.
SAVED_NAMES = (vjp.STATES_NAME, vjp.OUTPUT_NAME)
SISO_ARGS = ("Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "Angles", "D", "Z")
MIMO_ARGS = ("Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "MIMO_V", "MIMO_Z", "MIMO_Out", "Angles", "D", "Z")


def mamba3_siso_combined(
    Q: jax.Array,
    K: jax.Array,
    V: jax.Array,
    ADT: jax.Array,
    DT: jax.Array,
    Trap: jax.Array,
    Q_bias: jax.Array,
    K_bias: jax.Array,
    Angles: jax.Array,
    D: jax.Array | None = None,
    Z: jax.Array | None = None,
    Input_States: tuple | None = None,
    chunk_size: int = 64,
    return_final_states: bool = False,
    cu_seqlens: jax.Array | None = None,
    *,
    impl: str = "reference",
):
    """Mamba-3's SISO sequence mixer over whole sequences (the recurrence: ``reference``'s docstring).

    Shapes: Q (= C), K (= B) (batch, L, G, N); V (= x) and Z (batch, L, H, P), G dividing H; ADT (= A dt), DT and
    Trap (the trapezoid's logits, before their sigmoid) (batch, H, L); Q_bias, K_bias (H, N); Angles (batch, L, H, S)
    with 1 <= S <= N / 2, the rotary angles' raw inputs; D (H,). Input_States: (angle (batch, H, S), ssm (batch, H,
    P, N), k (batch, H, N), v (batch, H, P)), all four or None (zeros). Returns out (batch, L, H, P) in V's dtype, and
    with ``return_final_states`` also the final angle, ssm and k states (float32) and v (V's dtype), as
    ``Input_States`` takes them (a prefill then continues through ``mamba3_siso_step``). Unlike mamba-ssm's Triton
    op, which rounds Q, K, V, Z, Trap, Angles and its cumulative angles to bfloat16, the reference keeps float32.

    ``cu_seqlens`` int (num_sequences + 1,), from 0 to L strictly increasing: sequences packed along L of a batch of
    1, each from its own input states (``Input_States``' leading axis the sequence), their final states returned
    the same way. They are split on the host, so cu_seqlens must be concrete (not traced under jit).

    ``impl="pallas"``: for bfloat16/float16 V the Mosaic GPU kernels (Hopper; Q, K and their turned per-head values
    rounded to V's dtype, as mamba-ssm's Triton op does), for float32/float64 V the reference."""
    check_impl("mamba3_siso_combined", impl, _AVAILABLE_IMPLS)
    check_array("V", V, 4)
    batch, seqlen, heads, headdim = V.shape
    _check_qk(Q, K, (batch, seqlen), "(batch, L, G, N)", heads)
    dstate = Q.shape[-1]
    _check_per_head(ADT, DT, Trap, (batch, heads, seqlen), "(batch, H, L)")
    _check_common(Q_bias, K_bias, Angles, D, Z, V, (batch, seqlen, heads), "(batch, L, H, S)", dstate)
    check_positive_int("chunk_size", chunk_size)
    args = (Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z)
    run = reference.mamba3_siso
    if impl == "pallas":
        dispatch.check_kernels_run("mamba3_siso_combined")
        run = dispatch.mamba3_siso
    if cu_seqlens is None:
        states = _check_states(Input_States, batch, heads, headdim, dstate, Angles.shape[-1])
        out, finals = run(*args, states, chunk_size)
    else:
        bounds = _packed_bounds(cu_seqlens, batch, seqlen)
        states = _check_states(Input_States, len(bounds) - 1, heads, headdim, dstate, Angles.shape[-1], "num_sequences")
        named = dict(zip(SISO_ARGS, args, strict=True))
        out, finals = reference.mamba3_packed(run, named, states, chunk_size, bounds)
    return (out, *finals) if return_final_states else out


def mamba3_siso_step(
    Q: jax.Array,
    K: jax.Array,
    V: jax.Array,
    ADT: jax.Array,
    DT: jax.Array,
    Trap: jax.Array,
    Q_bias: jax.Array,
    K_bias: jax.Array,
    Angles: jax.Array,
    D: jax.Array | None = None,
    Z: jax.Array | None = None,
    Input_States: tuple | None = None,
    *,
    impl: str = "reference",
):
    """One decoding step of ``mamba3_siso_combined``: Q, K (batch, G, N); V, Z (batch, H, P); ADT, DT, Trap (batch,
    H); Q_bias, K_bias (H, N); Angles (batch, H, S); D (H,); Input_States as there (None: zeros). Returns (out
    (batch, H, P) in V's dtype, (angle, ssm, k, v) the new states), where mamba-ssm's kernel writes them in place."""
    check_impl("mamba3_siso_step", impl, _AVAILABLE_IMPLS)
    check_array("V", V, 3)
    batch, heads, headdim = V.shape
    _check_qk(Q, K, (batch,), "(batch, G, N)", heads)
    dstate = Q.shape[-1]
    _check_per_head(ADT, DT, Trap, (batch, heads), "(batch, H)")
    _check_common(Q_bias, K_bias, Angles, D, Z, V, (batch, heads), "(batch, H, S)", dstate)
    states = _check_states(Input_States, batch, heads, headdim, dstate, Angles.shape[-1])
    if impl == "pallas":
        dispatch.check_kernels_run("mamba3_siso_step")
        return dispatch.mamba3_siso_step(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, states)
    return reference.mamba3_siso_step(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D, Z, states)


def mamba3_mimo(
    Q: jax.Array,
    K: jax.Array,
    V: jax.Array,
    ADT: jax.Array,
    DT: jax.Array,
    Trap: jax.Array,
    Q_bias: jax.Array,
    K_bias: jax.Array,
    MIMO_V: jax.Array,
    MIMO_Z: jax.Array,
    MIMO_Out: jax.Array | None,
    Angles: jax.Array,
    D: jax.Array | None = None,
    Z: jax.Array | None = None,
    chunk_size: int = 16,
    rotary_dim_divisor: int = 4,
    dtype=None,
    return_state: bool = False,
    cu_seqlens: jax.Array | None = None,
    *,
    Input_States: tuple | None = None,
    impl: str = "reference",
):
    """Mamba-3's MIMO sequence mixer of rank R (the recurrence: ``reference``'s docstring).

    Shapes: Q (= C), K (= B) (batch, L, R, G, N), G dividing H; V (= x) and Z (batch, L, H, P); ADT, DT, Trap
    (batch, H, L); Q_bias, K_bias (H, R, N); MIMO_V, MIMO_Z, MIMO_Out (H, R, P), the ranks' input, gate and output
    projections (MIMO_Out None: the ranks' outputs come back unsummed); Angles (batch, L, H, N / rotary_dim_divisor)
    raw, feature j turned with feature j + N / 2; D (H,). Returns out (batch, L, H, P), or (batch, L, R, H, P)
    without MIMO_Out, in ``dtype`` (V's when None), and with ``return_state`` also the final angle, ssm (batch, H, P,
    N) and k (batch, R, H, N) states and v (batch, H, P), as ``mamba3_mimo_step`` takes them.

    ``cu_seqlens`` as ``mamba3_siso_combined``'s (concrete; each sequence's final v its own last step, where
    mamba-ssm's op returns the whole batch's last). ``Input_States`` (keyword only; mamba-ssm's op has none):
    (angle, ssm, k, v) with those shapes, per batch row (per sequence with cu_seqlens), or None (zeros)."""
    check_impl("mamba3_mimo", impl, _AVAILABLE_IMPLS)
    check_array("V", V, 4)
    batch, seqlen, heads, headdim = V.shape
    rank, dstate = _check_mimo(Q, K, V, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, D, Z, (batch, seqlen))
    _check_per_head(ADT, DT, Trap, (batch, heads, seqlen), "(batch, H, L)")
    pairs = _check_rotary(Angles, rotary_dim_divisor, dstate, (batch, seqlen, heads), "(batch, L, H, S)")
    check_positive_int("chunk_size", chunk_size)
    args = dict(
        zip(MIMO_ARGS, (Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D, Z), strict=True)
    )
    run = reference.mamba3_mimo
    if impl == "pallas":
        dispatch.check_kernels_run("mamba3_mimo")
        run = dispatch.mamba3_mimo
    if cu_seqlens is None:
        states = _check_states(Input_States, batch, heads, headdim, dstate, pairs, rank=rank)
        out, finals = run(**args, states=states, chunk_size=chunk_size)
    else:
        bounds = _packed_bounds(cu_seqlens, batch, seqlen)
        states = _check_states(Input_States, len(bounds) - 1, heads, headdim, dstate, pairs, "num_sequences", rank)
        out, finals = reference.mamba3_packed(run, args, states, chunk_size, bounds)
    out = out if dtype is None else out.astype(dtype)
    return (out, *finals) if return_state else out


def mamba3_mimo_step(
    Q: jax.Array,
    K: jax.Array,
    V: jax.Array,
    ADT: jax.Array,
    DT: jax.Array,
    Trap: jax.Array,
    Q_bias: jax.Array,
    K_bias: jax.Array,
    MIMO_V: jax.Array,
    MIMO_Z: jax.Array,
    MIMO_Out: jax.Array | None,
    Angles: jax.Array,
    D: jax.Array | None = None,
    Z: jax.Array | None = None,
    Input_States: tuple | None = None,
    rotary_dim_divisor: int = 4,
    *,
    impl: str = "reference",
):
    """One decoding step of ``mamba3_mimo``: Q, K (batch, R, G, N); V, Z (batch, H, P); ADT, DT, Trap (batch, H);
    Q_bias, K_bias (H, R, N); MIMO_V, MIMO_Z, MIMO_Out (H, R, P); Angles (batch, H, S); D (H,); Input_States (angle
    (batch, H, S), ssm (batch, H, P, N), k (batch, R, H, N), v (batch, H, P)) or None (zeros). Returns (out (batch, H,
    P), or (batch, R, H, P) without MIMO_Out, in V's dtype, the new states)."""
    check_impl("mamba3_mimo_step", impl, _AVAILABLE_IMPLS)
    check_array("V", V, 3)
    batch, heads, headdim = V.shape
    rank, dstate = _check_mimo(Q, K, V, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, D, Z, (batch,))
    _check_per_head(ADT, DT, Trap, (batch, heads), "(batch, H)")
    pairs = _check_rotary(Angles, rotary_dim_divisor, dstate, (batch, heads), "(batch, H, S)")
    states = _check_states(Input_States, batch, heads, headdim, dstate, pairs, rank=rank)
    args = dict(
        zip(MIMO_ARGS, (Q, K, V, ADT, DT, Trap, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, Angles, D, Z), strict=True)
    )
    if impl == "pallas":
        dispatch.check_kernels_run("mamba3_mimo_step")
        return dispatch.mamba3_mimo_step(**args, states=states)
    return reference.mamba3_mimo_step(**args, states=states)


def _check_mimo(Q, K, V, Q_bias, K_bias, MIMO_V, MIMO_Z, MIMO_Out, D, Z, lead: tuple) -> tuple[int, int]:
    """The MIMO arguments' shapes (all but the per-step scalars and the angles); returns (R, N)."""
    heads, headdim = V.shape[-2:]
    check_array("Q", Q, len(lead) + 3)
    layout = "(batch, L, R, G, N)" if len(lead) == 2 else "(batch, R, G, N)"
    if tuple(Q.shape[: len(lead)]) != lead:
        raise ValueError(f"Q must have shape {layout} with leading axes {lead} (as V's), got {tuple(Q.shape)}")
    check_shape("K", K, Q.shape, "like Q")
    check_divides("ngroups (Q.shape[-2])", heads, Q.shape[-2], "nheads (V.shape[-2])")
    rank, dstate = Q.shape[-3], Q.shape[-1]
    for name, value, size, letter in (
        ("Q_bias", Q_bias, dstate, "N"),
        ("K_bias", K_bias, dstate, "N"),
        ("MIMO_V", MIMO_V, headdim, "P"),
        ("MIMO_Z", MIMO_Z, headdim, "P"),
        ("MIMO_Out", MIMO_Out, headdim, "P"),
    ):
        if value is not None or name != "MIMO_Out":
            check_array(name, value, 3)
            check_shape(name, value, (heads, rank, size), f"(H, R, {letter})")
    if D is not None:
        check_array("D", D, 1)
        check_shape("D", D, (heads,), "(H,)")
    if Z is not None:
        check_array("Z", Z, V.ndim)
        check_shape("Z", Z, V.shape, "like V")
    return rank, dstate


def _check_rotary(Angles, divisor, dstate: int, lead: tuple, layout: str) -> int:
    """Angles with N / rotary_dim_divisor pairs (j, j + N / 2); returns that count."""
    if divisor not in (2, 4) or dstate % divisor:
        raise ValueError(
            f"rotary_dim_divisor must be 2 or 4 with N (Q.shape[-1]) a multiple of it, got {divisor!r} and N={dstate}"
        )
    check_array("Angles", Angles, len(lead) + 1)
    pairs = dstate // divisor
    check_shape("Angles", Angles, (*lead, pairs), layout.replace("S", "N / rotary_dim_divisor"))
    return pairs


def _check_qk(Q, K, lead: tuple, layout: str, heads: int) -> None:
    check_array("Q", Q, len(lead) + 2)
    if tuple(Q.shape[: len(lead)]) != lead:
        raise ValueError(f"Q must have shape {layout} with leading axes {lead} (as V's), got {tuple(Q.shape)}")
    check_shape("K", K, Q.shape, "like Q")
    check_divides("ngroups (Q.shape[-2])", heads, Q.shape[-2], "nheads (V.shape[-2])")


def _check_per_head(ADT, DT, Trap, shape: tuple, layout: str) -> None:
    """ADT, DT and Trap: one value per batch row and head (and step, over a sequence)."""
    for name, value in (("ADT", ADT), ("DT", DT), ("Trap", Trap)):
        check_array(name, value, len(shape))
        check_shape(name, value, shape, layout)


def _check_common(Q_bias, K_bias, Angles, D, Z, V, lead: tuple, angles_layout: str, dstate: int) -> None:
    heads = V.shape[-2]
    for name, value in (("Q_bias", Q_bias), ("K_bias", K_bias)):
        check_array(name, value, 2)
        check_shape(name, value, (heads, dstate), "(H, N)")
    check_array("Angles", Angles, len(lead) + 1)
    pairs = Angles.shape[-1]
    if tuple(Angles.shape[:-1]) != lead or not 1 <= pairs <= dstate // 2:
        raise ValueError(
            f"Angles must have shape {angles_layout} with leading axes {lead} and 1 <= S <= N / 2 = {dstate // 2}, "
            f"got {tuple(Angles.shape)}"
        )
    if D is not None:
        check_array("D", D, 1)
        check_shape("D", D, (heads,), "(H,)")
    if Z is not None:
        check_array("Z", Z, V.ndim)
        check_shape("Z", Z, V.shape, "like V")


def _packed_bounds(cu_seqlens, batch: int, seqlen: int) -> tuple[int, ...]:
    """cu_seqlens checked and read on the host."""
    check_cu_seqlens(cu_seqlens, batch, seqlen, needed_by="cu_seqlens")
    if isinstance(cu_seqlens, jax.core.Tracer):
        raise ValueError(
            "cu_seqlens must be concrete (a NumPy array, or a JAX array outside jit): mamba3_siso_combined's "
            "reference splits the packed sequences on the host"
        )
    return tuple(int(v) for v in np.asarray(cu_seqlens))


def _check_states(
    states, lead: int, heads: int, headdim: int, dstate: int, pairs: int, lead_name: str = "batch", rank=None
):
    """Input_States: None, or (angle, ssm, k, v) with their shapes; ``lead`` rows (batch rows or sequences); k per
    rank where ``rank`` is given (MIMO)."""
    if states is None:
        return None
    if not isinstance(states, tuple | list) or len(states) != 4:
        raise ValueError("Input_States must be a tuple (angle, ssm, k, v) of four arrays, or None")
    expected = {
        "angle": ((lead, heads, pairs), f"({lead_name}, H, S)"),
        "ssm": ((lead, heads, headdim, dstate), f"({lead_name}, H, P, N)"),
        "k": ((lead, heads, dstate), f"({lead_name}, H, N)")
        if rank is None
        else ((lead, rank, heads, dstate), f"({lead_name}, R, H, N)"),
        "v": ((lead, heads, headdim), f"({lead_name}, H, P)"),
    }
    for (name, (shape, layout)), value in zip(expected.items(), states, strict=True):
        check_array(f"Input_States {name}", value, len(shape))
        check_shape(f"Input_States {name}", value, shape, layout)
    return tuple(states)
