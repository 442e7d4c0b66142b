"""mamba-ssm's Triton SSD forward (``_mamba_chunk_scan_combined_fwd``) from JAX, kernel by kernel: chunk cumsum,
chunk state, state passing, C·Bᵀ per chunk, chunk scan, with the arguments mamba-ssm's host code gives each. The
backward (``ssd_jax_triton.backward``) recomputes the first four.

Layouts as at ``mamba_chunk_scan_combined``: x, z (batch, L, H, P); dt (batch, L, H); A (H,) float32; B, C
(batch, L, G, N); D (H,) or (H, P); dt_bias (H,); initial_states (batch, H, P, N); seq_idx int32 (batch, L).
Intermediates as mamba-ssm's: dt and dA_cumsum (batch, H, chunks, chunk) float32; chunk states
(batch, chunks, H, P, N); C·Bᵀ (batch, chunks, G, chunk, chunk) float32."""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from torch_reference.ssd_jax_triton.launch import (
    cdiv,
    dot_dtype,
    launch,
    named,
    next_power_of_2,
    placeholder,
    row_major,
)


class Seq(NamedTuple):
    """seq_idx as the kernels take it: the array (a placeholder without one), its strides, whether there is one."""

    array: jax.Array
    strides: tuple[int, int]
    present: bool

    @staticmethod
    def of(seq_idx) -> "Seq":
        if seq_idx is None:
            return Seq(placeholder(jnp.int32), (0, 0), False)
        return Seq(seq_idx.astype(jnp.int32), row_major(seq_idx.shape), True)


def per_chunk_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a (batch, H, chunks, chunk) array in the (batch, chunk, head, position) order mamba-ssm passes."""
    s = row_major(shape)
    return (s[0], s[2], s[1], s[3])


def kernels():
    """mamba-ssm's Triton modules (importable after ``torch_reference.backend.load``)."""
    from mamba_ssm.ops.triton import ssd_bmm, ssd_chunk_scan, ssd_chunk_state, ssd_combined, ssd_state_passing

    return ssd_bmm, ssd_chunk_scan, ssd_chunk_state, ssd_combined, ssd_state_passing


def chunk_cumsum(dt, A, dt_bias, chunk_size: int, dt_softplus: bool, dt_limit) -> tuple[jax.Array, jax.Array]:
    """``_chunk_cumsum_fwd``: (dt after bias/softplus/clamp, its cumulative dt·A) per chunk, both
    (batch, H, chunks, chunk) float32."""
    _, _, ssd_chunk_state, _, _ = kernels()
    batch, seqlen, nheads = dt.shape
    nchunks = cdiv(seqlen, chunk_size)
    per_chunk = (batch, nheads, nchunks, chunk_size)
    pc = per_chunk_strides(per_chunk)
    f32 = jnp.float32
    result = launch(
        ssd_chunk_state._chunk_cumsum_fwd_kernel,
        lambda m: (batch, nchunks, cdiv(nheads, m["BLOCK_SIZE_H"])),
        dict(
            dt_ptr=dt, A_ptr=A, dt_bias_ptr=placeholder(f32) if dt_bias is None else dt_bias, batch=batch,
            seqlen=seqlen, nheads=nheads, chunk_size=chunk_size, dt_min=float(dt_limit[0]), dt_max=float(dt_limit[1]),
            **named("stride_dt", ("batch", "seqlen", "head"), row_major(dt.shape)), stride_A_head=1,
            stride_dt_bias_head=0 if dt_bias is None else 1,
            **named("stride_dt_out", ("batch", "chunk", "head", "csize"), pc),
            **named("stride_dA_cs", ("batch", "chunk", "head", "csize"), pc),
        ),
        {"dt_out_ptr": jax.ShapeDtypeStruct(per_chunk, f32), "dA_cumsum_ptr": jax.ShapeDtypeStruct(per_chunk, f32)},
        dict(DT_SOFTPLUS=bool(dt_softplus), HAS_DT_BIAS=dt_bias is not None,
             BLOCK_SIZE_CHUNK=next_power_of_2(chunk_size)),
        "mamba_ssm_chunk_cumsum_fwd",
    )  # fmt: skip
    return result["dt_out_ptr"], result["dA_cumsum_ptr"]


def chunk_state(x, B, dt_chunks, dA_cumsum, seq: Seq) -> jax.Array:
    """``_chunk_state_fwd``: each chunk's own final state (batch, chunks, H, P, N) float32."""
    _, _, ssd_chunk_state, _, _ = kernels()
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2:]
    nchunks, chunk_size = dA_cumsum.shape[2:]
    states_shape = (batch, nchunks, nheads, headdim, dstate)
    pc = per_chunk_strides(dA_cumsum.shape)
    return launch(
        ssd_chunk_state._chunk_state_fwd_kernel,
        lambda m: (cdiv(headdim, m["BLOCK_SIZE_M"]) * cdiv(dstate, m["BLOCK_SIZE_N"]), batch * nchunks, nheads),
        dict(
            x_ptr=x, b_ptr=B, dt_ptr=dt_chunks, dA_cumsum_ptr=dA_cumsum, seq_idx_ptr=seq.array,
            hdim=headdim, dstate=dstate, chunk_size=chunk_size, batch=batch, seqlen=seqlen,
            nheads_ngroups_ratio=nheads // ngroups,
            **named("stride_x", ("batch", "seqlen", "head", "hdim"), row_major(x.shape)),
            **named("stride_b", ("batch", "seqlen", "head", "dstate"), row_major(B.shape)),
            **named("stride_states", ("batch", "chunk", "head", "hdim", "dstate"), row_major(states_shape)),
            **named("stride_dt", ("batch", "chunk", "head", "csize"), pc),
            **named("stride_dA_cs", ("batch", "chunk", "head", "csize"), pc),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
        ),
        {"states_ptr": jax.ShapeDtypeStruct(states_shape, jnp.float32)},
        dict(HAS_SEQ_IDX=seq.present),
        "mamba_ssm_chunk_state_fwd",
    )["states_ptr"]  # fmt: skip


def state_passing(states, dA_cumsum, initial_states, seq: Seq, seqlen: int, out_dtype) -> tuple[jax.Array, jax.Array]:
    """``_state_passing_fwd``: (the state entering each chunk (batch, chunks, H, P·N) in ``out_dtype``, the final
    state (batch, H, P·N) float32) from the chunks' own states and their end decays."""
    _, _, _, _, ssd_state_passing = kernels()
    batch, nchunks, nheads = states.shape[:3]
    chunk_size = dA_cumsum.shape[3]
    dim = math.prod(states.shape[3:])
    f32 = jnp.float32
    chunk_decay = dA_cumsum[:, :, :, -1]  # (batch, H, chunks); mamba-ssm passes a strided view
    decay = row_major(chunk_decay.shape)
    flat = (batch, nchunks, nheads, dim)
    init = None if initial_states is None else initial_states.astype(f32).reshape(batch, nheads, dim)
    result = launch(
        ssd_state_passing._state_passing_fwd_kernel,
        lambda m: (cdiv(dim, m["BLOCK_SIZE"]), batch, nheads),
        dict(
            states_ptr=states.reshape(flat), dA_cs_ptr=chunk_decay,
            initstates_ptr=placeholder(f32) if init is None else init, seq_idx_ptr=seq.array,
            dim=dim, nchunks=nchunks, seqlen=seqlen if seq.present else 0,
            chunk_size=chunk_size if seq.present else 0,
            **named("stride_states", ("batch", "chunk", "head", "dim"), row_major(flat)),
            **named("stride_out", ("batch", "chunk", "head", "dim"), row_major(flat)),
            **named("stride_final_states", ("batch", "head", "dim"), row_major((batch, nheads, dim))),
            **named("stride_dA_cs", ("batch", "chunk", "head"), (decay[0], decay[2], decay[1])),
            **named("stride_initstates", ("batch", "head", "dim"),
                    (0, 0, 0) if init is None else row_major(init.shape)),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
        ),
        {"out_ptr": jax.ShapeDtypeStruct(flat, out_dtype),
         "final_states_ptr": jax.ShapeDtypeStruct((batch, nheads, dim), f32)},
        dict(HAS_INITSTATES=init is not None, HAS_SEQ_IDX=seq.present),
        "mamba_ssm_state_passing_fwd",
    )  # fmt: skip
    return result["out_ptr"], result["final_states_ptr"]


def bmm_chunk(C, B, seq: Seq, chunk_size: int) -> jax.Array:
    """``_bmm_chunk_fwd``: C·Bᵀ within each chunk (batch, chunks, G, chunk, chunk) float32."""
    ssd_bmm, _, _, _, _ = kernels()
    batch, seqlen, ngroups, dstate = C.shape
    nchunks = cdiv(seqlen, chunk_size)
    cb_shape = (batch, nchunks, ngroups, chunk_size, chunk_size)
    return launch(
        ssd_bmm._bmm_chunk_fwd_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]) * cdiv(chunk_size, m["BLOCK_SIZE_N"]), batch,
                   nchunks * ngroups),
        dict(
            a_ptr=C, b_ptr=B, seq_idx_ptr=seq.array, seqlen=seqlen, chunk_size=chunk_size, K=dstate, ngroups=ngroups,
            **named("stride_a", ("batch", "seqlen", "head"), row_major(C.shape)[:3]), stride_ak=1,
            **named("stride_b", ("batch", "seqlen", "head"), row_major(B.shape)[:3]), stride_bk=1,
            **named("stride_out", ("batch", "chunk", "head"), row_major(cb_shape)[:3]),
            stride_outm=chunk_size, stride_outn=1,
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
        ),
        {"out_ptr": jax.ShapeDtypeStruct(cb_shape, jnp.float32)},
        dict(IS_CAUSAL=False, dot_dtype=dot_dtype(C.dtype, B.dtype), HAS_SEQ_IDX=seq.present),
        "mamba_ssm_bmm_chunk_fwd",
    )["out_ptr"]  # fmt: skip


def chunk_scan(cb, x, z, dt_chunks, dA_cumsum, seq: Seq, C, prev_states, D) -> tuple[jax.Array, jax.Array | None]:
    """``_chunk_scan_fwd``: (out (batch, L, H, P) in x's dtype, gated by silu(z) if z is given; the output before
    the gate, or None without z). ``prev_states`` (batch, chunks, H, P, N): the state entering each chunk."""
    _, ssd_chunk_scan, _, _, _ = kernels()
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = C.shape[2:]
    nchunks, chunk_size = dA_cumsum.shape[2:]
    x_strides = row_major(x.shape)
    pc = per_chunk_strides(dA_cumsum.shape)
    outputs = {"out_ptr": jax.ShapeDtypeStruct(x.shape, x.dtype)}
    if z is not None:
        outputs["out_x_ptr"] = jax.ShapeDtypeStruct(x.shape, x.dtype)
    result = launch(
        ssd_chunk_scan._chunk_scan_fwd_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]) * cdiv(headdim, m["BLOCK_SIZE_N"]), batch * nchunks, nheads),
        dict(
            cb_ptr=cb, x_ptr=x, z_ptr=placeholder(x.dtype) if z is None else z,
            **({} if z is not None else {"out_x_ptr": placeholder(x.dtype)}),
            dt_ptr=dt_chunks, dA_cumsum_ptr=dA_cumsum, seq_idx_ptr=seq.array, C_ptr=C,
            prev_states_ptr=prev_states, D_ptr=placeholder(jnp.float32) if D is None else D,
            chunk_size=chunk_size, hdim=headdim, dstate=dstate, batch=batch, seqlen=seqlen,
            nheads_ngroups_ratio=nheads // ngroups,
            **named("stride_cb", ("batch", "chunk", "head", "csize_m", "csize_k"), row_major(cb.shape)),
            **named("stride_x", ("batch", "seqlen", "head", "hdim"), x_strides),
            **named("stride_z", ("batch", "seqlen", "head", "hdim"), (0, 0, 0, 0) if z is None else x_strides),
            **named("stride_out", ("batch", "seqlen", "head", "hdim"), x_strides),
            **named("stride_dt", ("batch", "chunk", "head", "csize"), pc),
            **named("stride_dA_cs", ("batch", "chunk", "head", "csize"), pc),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
            **named("stride_C", ("batch", "seqlen", "head", "dstate"), row_major(C.shape)),
            **named("stride_states", ("batch", "chunk", "head", "hdim", "dstate"), row_major(prev_states.shape)),
            stride_D_head=0 if D is None else row_major(D.shape)[0],
        ),
        outputs,
        dict(IS_CAUSAL=True, HAS_D=D is not None, D_HAS_HDIM=D.ndim == 2 if D is not None else True,
             HAS_Z=z is not None, HAS_SEQ_IDX=seq.present,
             BLOCK_SIZE_DSTATE=max(next_power_of_2(dstate), 16), IS_TRITON_22=ssd_chunk_scan.TRITON_22),
        "mamba_ssm_chunk_scan_fwd",
    )  # fmt: skip
    return result["out_ptr"], result.get("out_x_ptr")


def forward(x, dt, A, B, C, chunk_size: int, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit):
    """``_mamba_chunk_scan_combined_fwd`` -> (out (batch, L, H, P) in x's dtype, the output before the z gate or
    None without z, final_states (batch, H, P, N) float32). Arguments as ``mamba_chunk_scan_combined``, checked."""
    batch, seqlen, nheads, headdim = x.shape
    dstate = B.shape[3]
    seq = Seq.of(seq_idx)
    dt_chunks, dA_cumsum = chunk_cumsum(dt, A, dt_bias, chunk_size, dt_softplus, dt_limit)
    states = chunk_state(x, B, dt_chunks, dA_cumsum, seq)
    passed, final_states = state_passing(states, dA_cumsum, initial_states, seq, seqlen, C.dtype)
    cb = bmm_chunk(C, B, seq, chunk_size)
    out, out_x = chunk_scan(cb, x, z, dt_chunks, dA_cumsum, seq, C, passed.reshape(states.shape), D)
    return out, out_x, final_states.reshape(batch, nheads, headdim, dstate)
