"""mamba-ssm's own Triton SSD forward kernels, launched from JAX through jax-triton.

Importing this module registers ``impl="mamba_ssm_triton"`` with ``pallas_kernels.ssd.mamba_chunk_scan_combined``
(forward only: jax-triton calls have no autodiff rule, and mamba-ssm's backward is not wired here). A benchmark can
then hold the kernels fixed and change the framework around them: the same five kernels as
``mamba_chunk_scan_combined``'s forward in PyTorch (chunk cumsum, chunk state, state passing, C·Bᵀ per chunk, chunk
scan), with the same autotuning configs, the same grids and the same intermediate layouts, taken at run time from the
installed mamba-ssm (``torch_reference.backend``), never copied. Needs a GPU, mamba-ssm and jax-triton 0.3.1.

Layouts as at ``mamba_chunk_scan_combined``: x, z (batch, L, H, P); dt (batch, L, H); A (H,) float32; B, C
(batch, L, G, N); D (H,) or (H, P); dt_bias (H,); initial_states (batch, H, P, N); seq_idx int32 (batch, L).
Intermediates as mamba-ssm's: dt and dA_cumsum (batch, H, chunks, chunk) float32; chunk states
(batch, chunks, H, P, N); C·Bᵀ (batch, chunks, G, chunk, chunk) float32."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels.ssd.api import MAMBA_SSM_TRITON, register_forward
from torch_reference.backend import load
from torch_reference.triton_outputs_last import outputs_last, parameter_order


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a contiguous array of ``shape`` (what ``torch.Tensor.stride()`` gives mamba-ssm)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _launch(kernel, grid, inputs: dict, outputs: dict, constants: dict, name: str) -> list:
    """One mamba-ssm kernel by parameter name: ``inputs`` arrays and scalars, ``outputs`` name ->
    ``jax.ShapeDtypeStruct`` (returned in the kernel's parameter order), ``constants`` its compile-time values
    (the autotuned ones come from its configs)."""
    import jax_triton

    runtime, _ = parameter_order(getattr(kernel, "fn", kernel), tuple(outputs))
    missing = [n for n in runtime if n not in inputs and n not in outputs]
    if missing:
        raise TypeError(f"{name}: no value for {missing}")
    # what Triton's own launcher would specialize on (jax-triton does not): integers that are multiples of 16
    sixteens = frozenset(n for n, v in inputs.items() if type(v) is int and v % 16 == 0)
    return jax_triton.triton_call(
        *[inputs[n] for n in runtime if n in inputs],
        kernel=outputs_last(kernel, tuple(outputs), sixteens),
        out_shape=[outputs[n] for n in runtime if n in outputs],
        grid=grid,
        name=name,
        **constants,
    )


def _placeholder(dtype) -> jax.Array:
    """A pointer argument the kernel never reads (its HAS_* constant is False)."""
    return jnp.zeros((1,), dtype)


def ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit):
    """mamba-ssm's ``_mamba_chunk_scan_combined_fwd`` from JAX -> (out (batch, L, H, P) in x's dtype,
    final_states (batch, H, P, N) float32). Arguments as ``mamba_chunk_scan_combined``, already checked."""
    load("cuda")  # mamba-ssm importable, with its CUDA extensions registered
    from mamba_ssm.ops.triton import ssd_bmm, ssd_chunk_scan, ssd_chunk_state, ssd_state_passing

    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    chunk_size = int(chunk_size)
    nchunks = math.ceil(seqlen / chunk_size)
    f32 = jnp.float32
    seq = _placeholder(jnp.int32) if seq_idx is None else seq_idx.astype(jnp.int32)
    seq_strides = (0, 0) if seq_idx is None else _row_major(seq.shape)
    has_seq = seq_idx is not None

    per_chunk = (batch, nheads, nchunks, chunk_size)
    pc = _row_major(per_chunk)
    pc_strides = (pc[0], pc[2], pc[1], pc[3])  # mamba-ssm passes (batch, chunk, head, position)
    bias = _placeholder(f32) if dt_bias is None else dt_bias
    dt_chunks, dA_cumsum = _launch(
        ssd_chunk_state._chunk_cumsum_fwd_kernel,
        lambda m: (batch, nchunks, _cdiv(nheads, m["BLOCK_SIZE_H"])),
        dict(
            dt_ptr=dt, A_ptr=A, dt_bias_ptr=bias, batch=batch, seqlen=seqlen, nheads=nheads, chunk_size=chunk_size,
            dt_min=float(dt_limit[0]), dt_max=float(dt_limit[1]),
            **_named("stride_dt", ("batch", "seqlen", "head"), _row_major(dt.shape)), stride_A_head=1,
            stride_dt_bias_head=0 if dt_bias is None else 1,
            **_named("stride_dt_out", ("batch", "chunk", "head", "csize"), pc_strides),
            **_named("stride_dA_cs", ("batch", "chunk", "head", "csize"), pc_strides),
        ),
        {"dt_out_ptr": jax.ShapeDtypeStruct(per_chunk, f32), "dA_cumsum_ptr": jax.ShapeDtypeStruct(per_chunk, f32)},
        dict(DT_SOFTPLUS=bool(dt_softplus), HAS_DT_BIAS=dt_bias is not None,
             BLOCK_SIZE_CHUNK=int(2 ** math.ceil(math.log2(chunk_size)))),
        "mamba_ssm_chunk_cumsum_fwd",
    )  # fmt: skip

    states_shape = (batch, nchunks, nheads, headdim, dstate)
    x_strides, b_strides = _row_major(x.shape), _row_major(B.shape)
    (states,) = _launch(
        ssd_chunk_state._chunk_state_fwd_kernel,
        lambda m: (_cdiv(headdim, m["BLOCK_SIZE_M"]) * _cdiv(dstate, m["BLOCK_SIZE_N"]), batch * nchunks, nheads),
        dict(
            x_ptr=x, b_ptr=B, dt_ptr=dt_chunks, dA_cumsum_ptr=dA_cumsum, seq_idx_ptr=seq,
            hdim=headdim, dstate=dstate, chunk_size=chunk_size, batch=batch, seqlen=seqlen,
            nheads_ngroups_ratio=nheads // ngroups,
            **_named("stride_x", ("batch", "seqlen", "head", "hdim"), x_strides),
            **_named("stride_b", ("batch", "seqlen", "head", "dstate"), b_strides),
            **_named("stride_states", ("batch", "chunk", "head", "hdim", "dstate"), _row_major(states_shape)),
            **_named("stride_dt", ("batch", "chunk", "head", "csize"), pc_strides),
            **_named("stride_dA_cs", ("batch", "chunk", "head", "csize"), pc_strides),
            **_named("stride_seq_idx", ("batch", "seqlen"), seq_strides),
        ),
        {"states_ptr": jax.ShapeDtypeStruct(states_shape, f32)},
        dict(HAS_SEQ_IDX=has_seq),
        "mamba_ssm_chunk_state_fwd",
    )  # fmt: skip

    dim = headdim * dstate
    chunk_decay = dA_cumsum[:, :, :, -1]  # (batch, H, chunks); mamba-ssm passes a strided view
    decay = _row_major(chunk_decay.shape)
    init = None if initial_states is None else initial_states.astype(f32).reshape(batch, nheads, dim)
    passed, final_states = _launch(
        ssd_state_passing._state_passing_fwd_kernel,
        lambda m: (_cdiv(dim, m["BLOCK_SIZE"]), batch, nheads),
        dict(
            states_ptr=states.reshape(batch, nchunks, nheads, dim), dA_cs_ptr=chunk_decay,
            initstates_ptr=_placeholder(f32) if init is None else init, seq_idx_ptr=seq,
            dim=dim, nchunks=nchunks, seqlen=seqlen if has_seq else 0, chunk_size=chunk_size if has_seq else 0,
            **_named("stride_states", ("batch", "chunk", "head", "dim"), _row_major((batch, nchunks, nheads, dim))),
            **_named("stride_out", ("batch", "chunk", "head", "dim"), _row_major((batch, nchunks, nheads, dim))),
            **_named("stride_final_states", ("batch", "head", "dim"), _row_major((batch, nheads, dim))),
            **_named("stride_dA_cs", ("batch", "chunk", "head"), (decay[0], decay[2], decay[1])),
            **_named("stride_initstates", ("batch", "head", "dim"),
                     (0, 0, 0) if init is None else _row_major(init.shape)),
            **_named("stride_seq_idx", ("batch", "seqlen"), seq_strides),
        ),
        {"out_ptr": jax.ShapeDtypeStruct((batch, nchunks, nheads, dim), C.dtype),
         "final_states_ptr": jax.ShapeDtypeStruct((batch, nheads, dim), f32)},
        dict(HAS_INITSTATES=init is not None, HAS_SEQ_IDX=has_seq),
        "mamba_ssm_state_passing_fwd",
    )  # fmt: skip

    cb_shape = (batch, nchunks, ngroups, chunk_size, chunk_size)
    (cb,) = _launch(
        ssd_bmm._bmm_chunk_fwd_kernel,
        lambda m: (_cdiv(chunk_size, m["BLOCK_SIZE_M"]) * _cdiv(chunk_size, m["BLOCK_SIZE_N"]), batch,
                   nchunks * ngroups),
        dict(
            a_ptr=C, b_ptr=B, seq_idx_ptr=seq, seqlen=seqlen, chunk_size=chunk_size, K=dstate, ngroups=ngroups,
            **_named("stride_a", ("batch", "seqlen", "head"), _row_major(C.shape)[:3]), stride_ak=1,
            **_named("stride_b", ("batch", "seqlen", "head"), b_strides[:3]), stride_bk=1,
            **_named("stride_out", ("batch", "chunk", "head"), _row_major(cb_shape)[:3]),
            stride_outm=chunk_size, stride_outn=1,
            **_named("stride_seq_idx", ("batch", "seqlen"), seq_strides),
        ),
        {"out_ptr": jax.ShapeDtypeStruct(cb_shape, f32)},
        dict(IS_CAUSAL=False, dot_dtype=_dot_dtype(C.dtype, B.dtype), HAS_SEQ_IDX=has_seq),
        "mamba_ssm_bmm_chunk_fwd",
    )  # fmt: skip

    outputs = {"out_ptr": jax.ShapeDtypeStruct(x.shape, x.dtype)}
    if z is not None:
        outputs["out_x_ptr"] = jax.ShapeDtypeStruct(x.shape, x.dtype)
    D_arg = _placeholder(f32) if D is None else D
    result = _launch(
        ssd_chunk_scan._chunk_scan_fwd_kernel,
        lambda m: (_cdiv(chunk_size, m["BLOCK_SIZE_M"]) * _cdiv(headdim, m["BLOCK_SIZE_N"]), batch * nchunks, nheads),
        dict(
            cb_ptr=cb, x_ptr=x, z_ptr=_placeholder(x.dtype) if z is None else z,
            **({} if z is not None else {"out_x_ptr": _placeholder(x.dtype)}),
            dt_ptr=dt_chunks, dA_cumsum_ptr=dA_cumsum, seq_idx_ptr=seq, C_ptr=C,
            prev_states_ptr=passed.reshape(states_shape), D_ptr=D_arg,
            chunk_size=chunk_size, hdim=headdim, dstate=dstate, batch=batch, seqlen=seqlen,
            nheads_ngroups_ratio=nheads // ngroups,
            **_named("stride_cb", ("batch", "chunk", "head", "csize_m", "csize_k"), _row_major(cb_shape)),
            **_named("stride_x", ("batch", "seqlen", "head", "hdim"), x_strides),
            **_named("stride_z", ("batch", "seqlen", "head", "hdim"), (0, 0, 0, 0) if z is None else x_strides),
            **_named("stride_out", ("batch", "seqlen", "head", "hdim"), x_strides),
            **_named("stride_dt", ("batch", "chunk", "head", "csize"), pc_strides),
            **_named("stride_dA_cs", ("batch", "chunk", "head", "csize"), pc_strides),
            **_named("stride_seq_idx", ("batch", "seqlen"), seq_strides),
            **_named("stride_C", ("batch", "seqlen", "head", "dstate"), _row_major(C.shape)),
            **_named("stride_states", ("batch", "chunk", "head", "hdim", "dstate"), _row_major(states_shape)),
            stride_D_head=0 if D is None else _row_major(D.shape)[0],
        ),
        outputs,
        dict(IS_CAUSAL=True, HAS_D=D is not None, D_HAS_HDIM=D.ndim == 2 if D is not None else True,
             HAS_Z=z is not None, HAS_SEQ_IDX=has_seq,
             BLOCK_SIZE_DSTATE=max(int(2 ** math.ceil(math.log2(dstate))), 16), IS_TRITON_22=ssd_chunk_scan.TRITON_22),
        "mamba_ssm_chunk_scan_fwd",
    )  # fmt: skip
    return result[0], final_states.reshape(batch, nheads, headdim, dstate)


def _named(prefix: str, axes: tuple[str, ...], strides: tuple[int, ...]) -> dict[str, int]:
    return {f"{prefix}_{axis}": int(stride) for axis, stride in zip(axes, strides, strict=True)}


def _dot_dtype(*dtypes):
    """The dot operand type mamba-ssm's ``_bmm_chunk_fwd`` picks from its inputs' dtypes."""
    import triton.language as tl

    names = {np.dtype(d).name for d in dtypes}
    return tl.bfloat16 if "bfloat16" in names else tl.float16 if "float16" in names else tl.float32


register_forward(MAMBA_SSM_TRITON, ssd_forward)
