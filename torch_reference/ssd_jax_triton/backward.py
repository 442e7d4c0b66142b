"""mamba-ssm's Triton SSD backward (``_mamba_chunk_scan_combined_bwd``) from JAX, kernel by kernel, in mamba-ssm's
default (non-deterministic) mode: the forward's first four kernels recomputed, then the z gate's gradient, the
chunk-state gradients, their passing back through the chunks, dx/ddt, dB, dC, d(C·Bᵀ) folded into dB and dC, the
stable d(dA_cumsum), and the chunk cumsum's own backward. The small reductions between kernels (sums over head
splits and partial tiles, the reverse cumulative sum) are XLA ops here where they are torch ops there.

Two mechanical differences from the PyTorch host code, neither changing a kernel or its arithmetic:
- outputs that mamba-ssm's configs zero through ``init_to_zero`` pre-hooks are zeroed by jax-triton
  (``jax_triton_launch.launch``);
- buffers of per-tile partial sums, of which mamba-ssm sums the tiles its autotuned block size used (it reads the
  chosen config back), start as zeros and are summed whole: the chosen config is not visible to JAX at trace time,
  and unused tiles then add zeros.

Layouts as ``ssd_jax_triton.forward``; the cotangents: dout (batch, L, H, P) in x's dtype, dfinal_states
(batch, H, P, N) float32 or None."""

import jax
import jax.numpy as jnp

from torch_reference.ssd_jax_triton.forward import (
    Seq,
    bmm_chunk,
    chunk_cumsum,
    chunk_state,
    kernels,
    per_chunk_strides,
    state_passing,
)
from torch_reference.ssd_jax_triton.launch import (
    cdiv,
    dot_dtype,
    launch,
    named,
    next_power_of_2,
    placeholder,
    row_major,
)

F32 = jnp.float32
X_AXES = ("batch", "seqlen", "head", "hdim")
CHUNK_AXES = ("batch", "chunk", "head", "csize")
STATE_AXES = ("batch", "chunk", "head", "hdim", "dstate")


def sm_count() -> int:
    """Streaming multiprocessors of the GPU (mamba-ssm sizes the head splits of dB, dC and d(C·Bᵀ) by it)."""
    return int(jax.devices()[0].core_count)


def head_splits(batch: int, nchunks: int, nheads: int, ngroups: int) -> tuple[int, int]:
    """(heads per program, programs per group) as mamba-ssm's dB/dC/d(C·Bᵀ) launches choose them."""
    ratio = nheads // ngroups
    per_program = max(min(cdiv(batch * nchunks * nheads, sm_count()), ratio), 1)
    return per_program, cdiv(ratio, per_program)


def dD_partials(D, chunk_size: int, batch: int, nchunks: int, nheads: int, headdim: int):
    """The per-tile dD buffer mamba-ssm's dz and dx kernels write (one row per 32-position tile of a chunk, per
    batch, chunk and head; per channel if D is (H, P)) -> (outputs entry, its stride parameters, the reduction to
    D's shape). Without D: no output, zero strides."""
    shape = (cdiv(chunk_size, 32), batch, nchunks, nheads, headdim if D is not None and D.ndim == 2 else 1)
    s = row_major(shape) if D is not None else (0,) * 5
    strides = named("stride_dD", ("batch", "chunk", "head", "csize", "hdim"), (s[1], s[2], s[3], s[0], s[4]))
    output = {} if D is None else {"dD_ptr": jax.ShapeDtypeStruct(shape, F32)}
    return output, strides, lambda tiles: tiles.sum(axis=(0, 1, 2)).reshape(D.shape).astype(D.dtype)


def chunk_scan_bwd_dz(x, z, out_x, dout, D, chunk_size: int):
    """``_chunk_scan_bwd_dz`` (without ddA_cumsum, output not recomputed): (dz, dout through the gate, dD or None)."""
    _, ssd_chunk_scan, _, _, _ = kernels()
    batch, seqlen, nheads, headdim = x.shape
    nchunks = cdiv(seqlen, chunk_size)
    xs = row_major(x.shape)
    dD_output, dD_strides, dD_of = dD_partials(D, chunk_size, batch, nchunks, nheads, headdim)
    outputs = {"dz_ptr": jax.ShapeDtypeStruct(z.shape, z.dtype), "dout_x_ptr": jax.ShapeDtypeStruct(x.shape, x.dtype),
               **dD_output}  # fmt: skip
    result = launch(
        ssd_chunk_scan._chunk_scan_bwd_dz_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]), batch * nchunks, nheads),
        dict(
            dout_ptr=dout, out_ptr=out_x, z_ptr=z, x_ptr=x, D_ptr=placeholder(F32) if D is None else D,
            outz_ptr=placeholder(x.dtype), ddA_cumsum_ptr=placeholder(F32),
            **({} if D is not None else {"dD_ptr": placeholder(F32)}),
            chunk_size=chunk_size, hdim=headdim, batch=batch, seqlen=seqlen,
            **named("stride_dout", X_AXES, xs), **named("stride_out", X_AXES, xs), **named("stride_z", X_AXES, xs),
            **named("stride_x", X_AXES, xs), stride_D_head=0 if D is None else row_major(D.shape)[0],
            **named("stride_outz", X_AXES, (0, 0, 0, 0)), **named("stride_dz", X_AXES, xs),
            **named("stride_doutx", X_AXES, xs),
            **dD_strides,
            **named("stride_ddA_cs", CHUNK_AXES, (0, 0, 0, 0)),
        ),
        outputs,
        dict(HAS_D=D is not None, D_HAS_HDIM=D.ndim == 2 if D is not None else True, HAS_DDACS=False,
             BLOCK_SIZE_N=max(next_power_of_2(headdim), 16), RECOMPUTE_OUTPUT=False),
        "mamba_ssm_chunk_scan_bwd_dz",
        zeroed=("dD_ptr",) if D is not None else (),
    )  # fmt: skip
    dD = None if D is None else dD_of(result["dD_ptr"])
    return result["dz_ptr"], result["dout_x_ptr"], dD


def chunk_scan_bwd_dstates(C, dA_cumsum, dout, seq: Seq) -> jax.Array:
    """``_chunk_scan_bwd_dstates``: the gradient of the state entering each chunk, (batch, chunks, H, P, N) f32."""
    _, ssd_chunk_scan, _, _, _ = kernels()
    batch, seqlen, nheads, headdim = dout.shape
    ngroups, dstate = C.shape[2:]
    nchunks, chunk_size = dA_cumsum.shape[2:]
    shape = (batch, nchunks, nheads, headdim, dstate)
    return launch(
        ssd_chunk_scan._chunk_scan_bwd_dstates_kernel,
        lambda m: (cdiv(headdim, m["BLOCK_SIZE_M"]) * cdiv(dstate, m["BLOCK_SIZE_N"]), batch * nchunks, nheads),
        dict(
            dout_ptr=dout, c_ptr=C, dA_cumsum_ptr=dA_cumsum, seq_idx_ptr=seq.array,
            hdim=headdim, dstate=dstate, chunk_size=chunk_size, batch=batch, seqlen=seqlen, nchunks=nchunks,
            nheads_ngroups_ratio=nheads // ngroups,
            **named("stride_dout", X_AXES, row_major(dout.shape)),
            **named("stride_c", ("batch", "seqlen", "head", "dstate"), row_major(C.shape)),
            **named("stride_dprev_states", STATE_AXES, row_major(shape)),
            **named("stride_dA_cs", CHUNK_AXES, per_chunk_strides(dA_cumsum.shape)),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
        ),
        {"dprev_states_ptr": jax.ShapeDtypeStruct(shape, F32)},
        dict(HAS_SEQ_IDX=seq.present),
        "mamba_ssm_chunk_scan_bwd_dstates",
    )["dprev_states_ptr"]  # fmt: skip


def state_passing_bwd(states, dA_cumsum, dstates, dfinal_states, seq: Seq, seqlen: int, has_initial: bool, dtype):
    """``_state_passing_bwd`` with dstates and states in ``dtype`` (x's): (dstates per chunk, d(chunk-end dA_cumsum)
    (batch, H, chunks) f32, d(initial_states) (batch, H, P·N) or None, the passed states in ``dtype``).
    ``states``/``dstates``: (batch, chunks, H, P·N) float32."""
    _, _, _, _, ssd_state_passing = kernels()
    batch, nchunks, nheads, dim = states.shape
    chunk_size = dA_cumsum.shape[3]
    chunk_decay = dA_cumsum[:, :, :, -1]
    decay = row_major(chunk_decay.shape)
    flat = row_major(states.shape)
    ddA_shape = (batch, nheads, nchunks, cdiv(dim, 64))
    dd = row_major(ddA_shape)
    convert = jnp.dtype(dtype) != jnp.dtype(F32)
    outputs = {
        "dstates_ptr": jax.ShapeDtypeStruct(states.shape, dtype),
        "ddA_cs_ptr": jax.ShapeDtypeStruct(ddA_shape, F32),
    }
    if has_initial:
        outputs["dinitstates_ptr"] = jax.ShapeDtypeStruct((batch, nheads, dim), dtype)
    if convert:
        outputs["states_converted_ptr"] = jax.ShapeDtypeStruct(states.shape, dtype)
    absent = {n: placeholder(dtype) for n in ("dinitstates_ptr", "states_converted_ptr") if n not in outputs}
    result = launch(
        ssd_state_passing._state_passing_bwd_kernel,
        lambda m: (cdiv(dim, m["BLOCK_SIZE"]), batch, nheads),
        dict(
            dout_ptr=dstates, out_ptr=states, dA_cs_ptr=chunk_decay,
            dfinal_states_ptr=placeholder(F32) if dfinal_states is None else dfinal_states,
            seq_idx_ptr=seq.array, **absent,
            dim=dim, nchunks=nchunks, seqlen=seqlen if seq.present else 0,
            chunk_size=chunk_size if seq.present else 0,
            **named("stride_dout", ("batch", "chunk", "head", "dim"), flat),
            **named("stride_out", ("batch", "chunk", "head", "dim"), flat),
            **named("stride_dA_cs", ("batch", "chunk", "head"), (decay[0], decay[2], decay[1])),
            **named("stride_dfinal_states", ("batch", "head", "dim"),
                    (0, 0, 0) if dfinal_states is None else row_major(dfinal_states.shape)),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
            **named("stride_dstates", ("batch", "chunk", "head", "dim"), flat),
            **named("stride_ddA_cs", ("batch", "chunk", "head"), (dd[0], dd[2], dd[1])),
            **named("stride_dinitstates", ("batch", "head", "dim"),
                    row_major((batch, nheads, dim)) if has_initial else (0, 0, 0)),
        ),
        outputs,
        dict(CONVERT_STATES=convert, HAS_DFINAL_STATES=dfinal_states is not None, HAS_DINITSTATES=has_initial,
             HAS_SEQ_IDX=seq.present),
        "mamba_ssm_state_passing_bwd",
        zeroed=("ddA_cs_ptr",),
    )  # fmt: skip
    return (
        result["dstates_ptr"],
        result["ddA_cs_ptr"].sum(axis=-1),
        result.get("dinitstates_ptr"),
        result["states_converted_ptr"] if convert else states,
    )


def chunk_scan_chunk_state_bwd_dx(x, dt_chunks, dA_cumsum, B, cb, dout, dstates, D, seq: Seq):
    """``_chunk_scan_chunk_state_bwd_dx``: (dx in x's dtype, d(dt per chunk) (batch, H, chunks, chunk) f32, dD
    from x or None). ``dstates`` (batch, chunks, H, P, N) in x's dtype."""
    _, _, _, ssd_combined, _ = kernels()
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2:]
    nchunks, chunk_size = dA_cumsum.shape[2:]
    xs, cbs, pc = row_major(x.shape), row_major(cb.shape), per_chunk_strides(dA_cumsum.shape)
    dD_output, dD_strides, dD_of = dD_partials(D, chunk_size, batch, nchunks, nheads, headdim)
    outputs = {"dx_ptr": jax.ShapeDtypeStruct(x.shape, x.dtype), "ddt_ptr": jax.ShapeDtypeStruct(dA_cumsum.shape, F32),
               **dD_output}  # fmt: skip
    result = launch(
        ssd_combined._chunk_scan_chunk_state_bwd_dx_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]) * cdiv(headdim, m["BLOCK_SIZE_N"]), batch * nchunks, nheads),
        dict(
            x_ptr=x, cb_ptr=cb, dout_ptr=dout, dt_ptr=dt_chunks, dA_cumsum_ptr=dA_cumsum, seq_idx_ptr=seq.array,
            D_ptr=placeholder(F32) if D is None else D, b_ptr=B, dstates_ptr=dstates,
            **({} if D is not None else {"dD_ptr": placeholder(F32)}),
            chunk_size=chunk_size, hdim=headdim, dstate=dstate, batch=batch, seqlen=seqlen,
            nheads_ngroups_ratio=nheads // ngroups,
            **named("stride_x", X_AXES, xs),
            # mamba-ssm passes C·Bᵀ's last two strides swapped: the kernel reads it transposed
            **named("stride_cb", ("batch", "chunk", "head", "csize_m", "csize_k"),
                    (cbs[0], cbs[1], cbs[2], cbs[4], cbs[3])),
            **named("stride_dout", X_AXES, row_major(dout.shape)),
            **named("stride_dt", CHUNK_AXES, pc), **named("stride_dA_cs", CHUNK_AXES, pc),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
            stride_D_head=0 if D is None else row_major(D.shape)[0],
            **named("stride_b", ("batch", "seqlen", "head", "dstate"), row_major(B.shape)),
            **named("stride_dstates", STATE_AXES, row_major(dstates.shape)),
            **named("stride_dx", X_AXES, xs),
            **named("stride_ddt", (*CHUNK_AXES, "tile"), (*pc, 0)),
            **dD_strides,
        ),
        outputs,
        dict(HAS_D=D is not None, D_HAS_HDIM=D.ndim == 2 if D is not None else True, HAS_SEQ_IDX=seq.present,
             BLOCK_SIZE_DSTATE=max(next_power_of_2(dstate), 16), IS_TRITON_22=ssd_combined.TRITON_22,
             DETERMINISTIC_REDUCTION=False),
        "mamba_ssm_chunk_scan_chunk_state_bwd_dx",
    )  # fmt: skip
    dD = None if D is None else dD_of(result["dD_ptr"])
    return result["dx_ptr"], result["ddt_ptr"], dD


def chunk_state_bwd_db(x, dt_chunks, dA_cumsum, dstates, seq: Seq, B) -> tuple[jax.Array, jax.Array]:
    """``_chunk_state_bwd_db`` with ddA: (dB from the chunk states (batch, L, G, N) f32, its d(dA_cumsum)
    (batch, H, chunks, chunk) f32, already cumulatively summed as mamba-ssm returns it)."""
    _, _, ssd_chunk_state, _, _ = kernels()
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2:]
    nchunks, chunk_size = dA_cumsum.shape[2:]
    per_program, nsplits = head_splits(batch, nchunks, nheads, ngroups)
    db_shape = (batch, seqlen, nsplits, ngroups, dstate)
    pc = per_chunk_strides(dA_cumsum.shape)
    result = launch(
        ssd_chunk_state._chunk_state_bwd_db_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]) * cdiv(dstate, m["BLOCK_SIZE_N"]), batch * nchunks,
                   nsplits * ngroups),
        dict(
            x_ptr=x, dstates_ptr=dstates, b_ptr=B, dt_ptr=dt_chunks, dA_cumsum_ptr=dA_cumsum, seq_idx_ptr=seq.array,
            chunk_size=chunk_size, dstate=dstate, hdim=headdim, batch=batch, seqlen=seqlen, nheads=nheads,
            nheads_per_program=per_program, ngroups=ngroups,
            **named("stride_x", X_AXES, row_major(x.shape)),
            **named("stride_dstates", ("batch", "chunk"), row_major(dstates.shape)[:2]),
            **named("stride_states", ("head", "hdim", "dstate"), row_major(dstates.shape)[2:]),
            **named("stride_b", ("batch", "seqlen", "head", "dstate"), row_major(B.shape)),
            **named("stride_dt", CHUNK_AXES, pc), **named("stride_dA_cs", CHUNK_AXES, pc),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
            **named("stride_db", ("batch", "seqlen", "split", "group", "dstate"), row_major(db_shape)),
            **named("stride_ddA_cs", CHUNK_AXES, pc), stride_ddA_tile=0,
        ),
        {"db_ptr": jax.ShapeDtypeStruct(db_shape, F32), "ddA_cumsum_ptr": jax.ShapeDtypeStruct(dA_cumsum.shape, F32)},
        dict(HAS_DDA_CS=True, HAS_SEQ_IDX=seq.present, DETERMINISTIC_REDUCTION=False,
             BLOCK_SIZE_K=max(next_power_of_2(headdim), 16)),
        "mamba_ssm_chunk_state_bwd_db",
    )  # fmt: skip
    return result["db_ptr"].sum(axis=2), jnp.cumsum(result["ddA_cumsum_ptr"], axis=-1)


def chunk_scan_bwd_dC(prev_states, dA_cumsum, dout, seq: Seq, C) -> tuple[jax.Array, jax.Array]:
    """``_chunk_scan_bwd_dC`` with ddA: (dC from the passed states (batch, L, G, N) f32, d(dA_cumsum) from them
    (batch, H, chunks, chunk) f32). ``prev_states`` (batch, chunks, H, P, N) in x's dtype."""
    _, ssd_chunk_scan, _, _, _ = kernels()
    batch, seqlen, nheads, headdim = dout.shape
    ngroups, dstate = C.shape[2:]
    nchunks, chunk_size = dA_cumsum.shape[2:]
    per_program, nsplits = head_splits(batch, nchunks, nheads, ngroups)
    dc_shape = (batch, seqlen, nsplits, ngroups, dstate)
    pc = per_chunk_strides(dA_cumsum.shape)
    result = launch(
        ssd_chunk_scan._chunk_scan_bwd_dc_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]) * cdiv(dstate, m["BLOCK_SIZE_N"]), batch * nchunks,
                   nsplits * ngroups),
        dict(
            dout_ptr=dout, prev_states_ptr=prev_states, C_ptr=C, dA_cumsum_ptr=dA_cumsum, seq_idx_ptr=seq.array,
            chunk_size=chunk_size, dstate=dstate, hdim=headdim, batch=batch, seqlen=seqlen, nheads=nheads,
            nheads_per_program=per_program, ngroups=ngroups,
            **named("stride_dout", X_AXES, row_major(dout.shape)),
            **named("stride_prev_states", STATE_AXES, row_major(prev_states.shape)),
            **named("stride_C", ("batch", "seqlen", "head", "dstate"), row_major(C.shape)),
            **named("stride_dA_cs", CHUNK_AXES, pc),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
            **named("stride_dc", ("batch", "seqlen", "split", "group", "dstate"), row_major(dc_shape)),
            **named("stride_ddA_cs", CHUNK_AXES, pc), stride_ddA_tile=0,
        ),
        {"dc_ptr": jax.ShapeDtypeStruct(dc_shape, F32), "ddA_cumsum_ptr": jax.ShapeDtypeStruct(dA_cumsum.shape, F32)},
        dict(HAS_DDA_CS=True, HAS_SEQ_IDX=seq.present, DETERMINISTIC_REDUCTION=False,
             BLOCK_SIZE_K=max(next_power_of_2(headdim), 16)),
        "mamba_ssm_chunk_scan_bwd_dc",
    )  # fmt: skip
    return result["dc_ptr"].sum(axis=2), result["ddA_cumsum_ptr"]


def chunk_scan_bwd_dcb(x, dt_chunks, dA_cumsum, dout, seq: Seq, ngroups: int) -> jax.Array:
    """``_chunk_scan_bwd_dcb`` (without ddA): d(C·Bᵀ) (batch, chunks, G, chunk, chunk) f32."""
    _, ssd_chunk_scan, _, _, _ = kernels()
    batch, seqlen, nheads, headdim = x.shape
    nchunks, chunk_size = dA_cumsum.shape[2:]
    per_program, nsplits = head_splits(batch, nchunks, nheads, ngroups)
    dcb_shape = (batch, nchunks, nsplits, ngroups, chunk_size, chunk_size)
    pc = per_chunk_strides(dA_cumsum.shape)
    return launch(
        ssd_chunk_scan._chunk_scan_bwd_dcb_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]) * cdiv(chunk_size, m["BLOCK_SIZE_N"]), batch * nchunks,
                   nsplits * ngroups),
        dict(
            x_ptr=x, dout_ptr=dout, cb_ptr=placeholder(F32), dt_ptr=dt_chunks, dA_cumsum_ptr=dA_cumsum,
            seq_idx_ptr=seq.array, ddA_cumsum_ptr=placeholder(F32),
            chunk_size=chunk_size, hdim=headdim, batch=batch, seqlen=seqlen, nheads=nheads,
            nheads_per_program=per_program, ngroups=ngroups,
            **named("stride_x", X_AXES, row_major(x.shape)), **named("stride_dout", X_AXES, row_major(dout.shape)),
            **named("stride_cb", ("batch", "chunk", "head", "csize_m", "csize_n"), (0,) * 5),
            **named("stride_dt", CHUNK_AXES, pc), **named("stride_dA_cs", CHUNK_AXES, pc),
            **named("stride_seq_idx", ("batch", "seqlen"), seq.strides),
            **named("stride_dcb", ("batch", "chunk", "split", "group", "csize_m", "csize_n"), row_major(dcb_shape)),
            **named("stride_ddA_cs", ("batch", "chunk", "head", "csize_m", "csize_n"), (0,) * 5),
        ),
        {"dcb_ptr": jax.ShapeDtypeStruct(dcb_shape, F32)},
        dict(HAS_DDA_CS=False, HAS_SEQ_IDX=seq.present, BLOCK_SIZE_K=max(next_power_of_2(headdim), 16)),
        "mamba_ssm_chunk_scan_bwd_dcb",
    )["dcb_ptr"].sum(axis=2)  # fmt: skip


def bmm_chunk_bwd(a, dcb, residual, transpose: bool, out_dtype) -> jax.Array:
    """``_bmm_chunk_bwd``: a's partner's gradient from d(C·Bᵀ): dcb (batch, chunks, G, chunk, chunk) f32 applied to
    ``a`` (batch, L, G, N), plus ``residual`` (batch, L, G, N) f32, in ``out_dtype``. ``transpose``: use dcbᵀ per
    chunk (mamba-ssm passes a transposed view: the same array with its last two strides swapped)."""
    ssd_bmm, _, _, _, _ = kernels()
    batch, seqlen, ngroups, k = a.shape
    nchunks, chunk_size = dcb.shape[1], dcb.shape[-1]
    s = row_major(dcb.shape)
    a_strides, res_strides = row_major(a.shape), row_major(residual.shape)
    return launch(
        ssd_bmm._bmm_chunk_bwd_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]) * cdiv(k, m["BLOCK_SIZE_N"]), batch, nchunks * ngroups),
        dict(
            a_ptr=a, dout_ptr=dcb, res_ptr=residual, seqlen=seqlen, chunk_size=chunk_size, K=k, ngroups=ngroups,
            **named("stride_a", ("batch", "seqlen", "head"), a_strides[:3]), stride_ak=a_strides[3],
            **named("stride_dout", ("batch", "chunk", "head", "csize_m", "csize_n"),
                    (*s[:3], s[4], s[3]) if transpose else s),
            **named("stride_db", ("batch", "seqlen", "head", "k"), a_strides),
            **named("stride_res", ("batch", "seqlen", "head", "k"), res_strides),
        ),
        {"db_ptr": jax.ShapeDtypeStruct(a.shape, out_dtype)},
        dict(dot_dtype=dot_dtype(a.dtype, dcb.dtype), HAS_RESIDUAL=True),
        "mamba_ssm_bmm_chunk_bwd",
    )["db_ptr"]  # fmt: skip


def chunk_scan_bwd_ddAcs_stable(x, dt_chunks, dA_cumsum, dout, cb) -> jax.Array:
    """``_chunk_scan_bwd_ddAcs_stable``: d(dA_cumsum) through the intra-chunk part, (batch, H, chunks, chunk) f32."""
    _, ssd_chunk_scan, _, _, _ = kernels()
    batch, seqlen, nheads, headdim = x.shape
    nchunks, chunk_size = dA_cumsum.shape[2:]
    shape = (batch, nheads, nchunks, cdiv(chunk_size, 32), chunk_size)
    s = row_major(shape)
    pc = per_chunk_strides(dA_cumsum.shape)
    return launch(
        ssd_chunk_scan._chunk_scan_bwd_ddAcs_stable_kernel,
        lambda m: (cdiv(chunk_size, m["BLOCK_SIZE_M"]), batch * nchunks, nheads),
        dict(
            x_ptr=x, dout_ptr=dout, dt_ptr=dt_chunks, dA_cumsum_ptr=dA_cumsum, cb_ptr=cb,
            chunk_size=chunk_size, hdim=headdim, batch=batch, seqlen=seqlen,
            nheads_ngroups_ratio=nheads // cb.shape[2],
            **named("stride_x", X_AXES, row_major(x.shape)), **named("stride_dout", X_AXES, row_major(dout.shape)),
            **named("stride_dt", CHUNK_AXES, pc), **named("stride_dA_cs", CHUNK_AXES, pc),
            **named("stride_cb", ("batch", "chunk", "head", "csize_m", "csize_n"), row_major(cb.shape)),
            **named("stride_ddA_cs", ("batch", "chunk", "head", "csize_m", "csize_n"), (s[0], s[2], s[1], s[3], s[4])),
        ),
        {"ddA_cumsum_ptr": jax.ShapeDtypeStruct(shape, F32)},
        dict(BLOCK_SIZE_K=max(next_power_of_2(headdim), 16)),
        "mamba_ssm_chunk_scan_bwd_ddAcs_stable",
        zeroed=("ddA_cumsum_ptr",),
    )["ddA_cumsum_ptr"].sum(axis=3)  # fmt: skip


def chunk_cumsum_bwd(ddA, ddt_chunks, dt, A, dt_bias, dt_softplus: bool, dt_limit):
    """``_chunk_cumsum_bwd``: (ddt (batch, L, H) in dt's dtype, dA (H,) f32, ddt_bias (H,) f32 or None) from
    d(dA_cumsum) and d(dt per chunk), both (batch, H, chunks, chunk) f32."""
    _, _, ssd_chunk_state, _, _ = kernels()
    batch, seqlen, nheads = dt.shape
    nchunks, chunk_size = ddA.shape[2:]
    pc = per_chunk_strides(ddA.shape)
    outputs = {"ddt_ptr": jax.ShapeDtypeStruct(dt.shape, dt.dtype), "dA_ptr": jax.ShapeDtypeStruct((nheads,), F32)}
    if dt_bias is not None:
        outputs["ddt_bias_ptr"] = jax.ShapeDtypeStruct((nheads,), F32)
    result = launch(
        ssd_chunk_state._chunk_cumsum_bwd_kernel,
        lambda m: (batch, nchunks, cdiv(nheads, m["BLOCK_SIZE_H"])),
        dict(
            ddA_ptr=ddA, ddt_out_ptr=ddt_chunks, dt_ptr=dt, A_ptr=A,
            dt_bias_ptr=placeholder(F32) if dt_bias is None else dt_bias,
            **({} if dt_bias is not None else {"ddt_bias_ptr": placeholder(F32)}),
            batch=batch, seqlen=seqlen, nheads=nheads, chunk_size=chunk_size,
            dt_min=float(dt_limit[0]), dt_max=float(dt_limit[1]),
            **named("stride_ddA", ("batch", "chunk", "head", "csize"), pc),
            **named("stride_ddt_out", ("batch", "chunk", "head", "csize"), pc),
            **named("stride_dt", ("batch", "seqlen", "head"), row_major(dt.shape)), stride_A_head=1,
            stride_dt_bias_head=0 if dt_bias is None else 1,
            **named("stride_ddt", ("batch", "seqlen", "head"), row_major(dt.shape)),
            stride_dA_batch=0, stride_dA_chunk=0, stride_dA_head=1,
            stride_ddt_bias_batch=0, stride_ddt_bias_chunk=0, stride_ddt_bias_head=0 if dt_bias is None else 1,
        ),
        outputs,
        dict(DT_SOFTPLUS=bool(dt_softplus), HAS_DT_BIAS=dt_bias is not None,
             BLOCK_SIZE_CHUNK=next_power_of_2(chunk_size), DETERMINISTIC_REDUCTION=False),
        "mamba_ssm_chunk_cumsum_bwd",
    )  # fmt: skip
    return result["ddt_ptr"], result["dA_ptr"], result.get("ddt_bias_ptr")


def backward(
    dout, dfinal_states, x, dt, A, B, C, out_x, chunk_size: int, D, z, dt_bias, initial_states, seq_idx,
    dt_softplus: bool, dt_limit,
):  # fmt: skip
    """``_mamba_chunk_scan_combined_bwd`` -> (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states), each None
    where its input is. ``out_x``: the forward's output before the z gate (its output where z is None)."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2:]
    seq = Seq.of(seq_idx)
    dt_chunks, dA_cumsum = chunk_cumsum(dt, A, dt_bias, chunk_size, dt_softplus, dt_limit)
    cb = bmm_chunk(C, B, seq, chunk_size)
    states = chunk_state(x, B, dt_chunks, dA_cumsum, seq)
    passed, _ = state_passing(states, dA_cumsum, initial_states, seq, seqlen, F32)
    dz, dD = None, None
    if z is not None:
        dz, dout, dD = chunk_scan_bwd_dz(x, z, out_x, dout, D, chunk_size)
    dstates = chunk_scan_bwd_dstates(C, dA_cumsum, dout, seq)
    flat = passed.shape
    dstates, ddA_chunk_end, dinitial, passed = state_passing_bwd(
        passed, dA_cumsum, dstates.reshape(flat),
        None if dfinal_states is None else dfinal_states.astype(F32).reshape(batch, nheads, -1),
        seq, seqlen, initial_states is not None, x.dtype,
    )  # fmt: skip
    state_shape = (batch, flat[1], nheads, headdim, dstate)
    dstates, passed = dstates.reshape(state_shape), passed.reshape(state_shape)
    dx, ddt_chunks, dD_from_x = chunk_scan_chunk_state_bwd_dx(x, dt_chunks, dA_cumsum, B, cb, dout, dstates, D, seq)
    dB, ddA_next = chunk_state_bwd_db(x, dt_chunks, dA_cumsum, dstates, seq, B)
    dC, ddA_prev = chunk_scan_bwd_dC(passed.astype(x.dtype), dA_cumsum, dout, seq, C)
    dcb = chunk_scan_bwd_dcb(x, dt_chunks, dA_cumsum, dout, seq, ngroups)
    dB = bmm_chunk_bwd(C, dcb, dB, transpose=False, out_dtype=B.dtype)
    dC = bmm_chunk_bwd(B, dcb, dC, transpose=True, out_dtype=C.dtype)
    if z is None:
        dD = dD_from_x
    ddA_prev = ddA_prev.at[..., -1].add(ddA_chunk_end)
    ddA_prev = jnp.flip(jnp.cumsum(jnp.flip(ddA_prev, -1), axis=-1), -1)
    ddA = chunk_scan_bwd_ddAcs_stable(x, dt_chunks, dA_cumsum, dout, cb) + ddA_next + ddA_prev
    ddt, dA, ddt_bias = chunk_cumsum_bwd(ddA, ddt_chunks, dt, A, dt_bias, dt_softplus, dt_limit)
    if dinitial is not None:
        dinitial = dinitial.reshape(batch, nheads, headdim, dstate)
    return dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial
