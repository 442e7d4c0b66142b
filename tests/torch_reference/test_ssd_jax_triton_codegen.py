"""What jax-triton compiles, on the CPU (Triton compiles for sm_90 without a GPU): each of mamba-ssm's SSD forward
kernels, launched through torch_reference.ssd_jax_triton (jax-triton's view: pointers 16-byte aligned, nothing known
of scalars), compiles to the same global-memory and tensor-core instructions as the kernel itself compiled the way
Triton's own launcher specializes a PyTorch call (integers that are multiples of 16 marked so). Without the
wrapper's hints the chunk scan loaded and stored bf16 one element at a time."""

import collections
import re

import numpy as np
import pytest

from tests.torch_reference.jax_triton_recorder import record_jax_launches

MEMORY_AND_MMA = ("ld.global", "st.global", "cp.async", "wgmma.mma", "mma.sync", "ldmatrix")


def launches(monkeypatch) -> dict:
    """{launch name: Launch} of one 130m-like bf16 forward (with D, z and dt_bias)."""
    import jax.numpy as jnp

    batch, seqlen, nheads, headdim, ngroups, dstate, chunk = 2, 512, 8, 64, 1, 128, 256
    bf16 = jnp.bfloat16
    x = jnp.zeros((batch, seqlen, nheads, headdim), bf16)
    B = jnp.zeros((batch, seqlen, ngroups, dstate), bf16)
    heads = jnp.zeros((nheads,), jnp.float32)
    dt = jnp.zeros((batch, seqlen, nheads), bf16)
    arrays = {"x": x, "dt": dt, "A": heads, "B": B, "C": B, "D": heads, "z": x, "dt_bias": heads}
    return {launch.name: launch for launch in record_jax_launches(monkeypatch, arrays, chunk)}


def instruction_counts(jit, names, values, constants, config, scalar_hints: bool) -> collections.Counter:
    """PTX instruction counts of ``jit`` compiled for sm_90 with ``values`` (arrays by dtype, Python scalars)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature, attrs, constexprs = {}, {}, {**constants, **config.kwargs}
    for i, (name, value) in enumerate(zip(names, values, strict=False)):
        if hasattr(value, "dtype"):
            dtype = np.dtype(value.dtype).name
            signature[name] = "*" + {"bfloat16": "bf16", "float32": "fp32", "int32": "i32"}[dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value == 1:  # both launchers make an integer 1 a constant
            signature[name], constexprs[name] = "constexpr", 1
        else:
            signature[name] = "i32"
            if scalar_hints and value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    signature |= {name: "constexpr" for name in constexprs}
    compiled = triton.compile(
        ASTSource(jit, signature, constexprs=constexprs, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": config.num_warps, "num_stages": config.num_stages},
    )
    counts = collections.Counter()
    for line in compiled.asm["ptx"].splitlines():
        match = re.match(r"\s*(?:@%p\d+\s+)?([a-z]+(?:\.[a-z0-9]+)*)", line)
        if match and match.group(1).startswith(MEMORY_AND_MMA):
            counts[match.group(1)] += 1
    return counts


@pytest.mark.parametrize("launch", ["mamba_ssm_chunk_scan_fwd", "mamba_ssm_chunk_state_fwd", "mamba_ssm_bmm_chunk_fwd"])
def test_jax_launch_compiles_like_triton_launcher(cpu_reference, monkeypatch, launch):
    _, wrapped, values, constants, _ = launches(monkeypatch)[launch]
    config = wrapped.configs[0]
    ours = instruction_counts(wrapped.fn, wrapped.fn.arg_names, values, constants, config, scalar_hints=False)
    original = wrapped.fn.fn.__globals__["_kernel"]  # the mamba-ssm kernel the wrapper calls
    by_name = dict(zip(wrapped.fn.arg_names, values, strict=False))
    ordered = [by_name[name] for name in original.arg_names if name in by_name]
    theirs = instruction_counts(original, original.arg_names, ordered, constants, config, scalar_hints=True)
    assert ours == theirs and sum(ours.values()) > 0
    assert not any(key in ours for key in ("ld.global.b16", "st.global.b16"))  # no element-wise bf16 access
