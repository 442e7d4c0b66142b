"""mamba-ssm's own Triton SSD kernels, forward and backward, launched from JAX through jax-triton.

Importing this package registers ``impl="mamba_ssm_triton"`` with ``pallas_kernels.ssd.mamba_chunk_scan_combined``:
a differentiable function (``jax.custom_vjp``) whose forward is mamba-ssm's ``_mamba_chunk_scan_combined_fwd``
(``ssd_jax_triton.forward``) and whose backward is its ``_mamba_chunk_scan_combined_bwd``
(``ssd_jax_triton.backward``). A benchmark or a training step can then hold the kernels fixed and change the
framework around them: the same kernels, autotuning configs, grids and intermediate layouts as mamba-ssm in PyTorch,
taken at run time from the installed mamba-ssm (``torch_reference.backend``), never copied. As in mamba-ssm's
autograd function, the forward saves its inputs and its output before the z gate, and the backward recomputes the
rest. Needs a GPU, mamba-ssm and jax-triton 0.3.1.

``launch`` launches one installed Triton kernel from JAX with the arguments mamba-ssm's host code would give it;
``forward`` and ``backward`` call mamba-ssm's kernels in the order and with the arguments its host code does."""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels.ssd.api import MAMBA_SSM_TRITON, register_impl
from torch_reference.backend import load
from torch_reference.ssd_jax_triton import backward, forward


@functools.partial(jax.custom_vjp, nondiff_argnums=(10, 11, 12, 13))
def _ssd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit, with_final):
    out, _, final_states = forward.forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx,
                                           dt_softplus, dt_limit)  # fmt: skip
    return (out, final_states) if with_final else out


def _ssd_fwd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk_size, dt_softplus, dt_limit, with_final):
    out, out_x, final_states = forward.forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx,
                                               dt_softplus, dt_limit)  # fmt: skip
    saved = (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, out if z is None else out_x)
    return ((out, final_states) if with_final else out), saved


def _ssd_bwd(chunk_size, dt_softplus, dt_limit, with_final, saved, cotangents):
    x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, out_x = saved
    dout, dfinal = cotangents if with_final else (cotangents, None)
    dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinit = backward.backward(
        dout.astype(x.dtype), dfinal, x, dt, A, B, C, out_x, chunk_size, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, dt_limit,
    )  # fmt: skip
    like = lambda grad, primal: None if primal is None else grad.astype(primal.dtype)  # noqa: E731
    return (
        like(dx, x), like(ddt, dt), like(dA, A), like(dB, B), like(dC, C), like(dD, D), like(dz, z),
        like(ddt_bias, dt_bias), like(dinit, initial_states), None,
    )  # fmt: skip


_ssd.defvjp(_ssd_fwd, _ssd_bwd)


def ssd(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit,
        return_final_states):  # fmt: skip
    """mamba-ssm's kernels for ``mamba_chunk_scan_combined`` (arguments already checked there) -> out, or
    (out, final_states float32) with ``return_final_states``; differentiable in every float argument."""
    load("cuda", require_extensions=False)  # mamba-ssm importable (its Triton kernels need no CUDA build)
    limit = (float(dt_limit[0]), float(dt_limit[1]))
    A = A.astype(jnp.float32)
    return _ssd(x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, int(chunk_size), bool(dt_softplus), limit,
                bool(return_final_states))  # fmt: skip


register_impl(MAMBA_SSM_TRITON, ssd)
