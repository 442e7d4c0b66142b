"""impl="mamba_ssm_triton" on the GPU: mamba-ssm's Triton SSD forward launched from JAX against the pure-JAX
reference (``impl="reference"``) and against mamba-ssm launched by PyTorch on the same values, on random shapes
including length 1, lengths that are not multiples of the chunk, several head groups, D per head and per channel,
z, dt_bias, seq_idx and initial states. Needs a GPU, mamba-ssm's build and jax-triton."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

CASES = [  # batch, L, H, P, G, N, chunk, options
    (1, 1, 4, 16, 1, 16, 64, {}),
    (2, 100, 4, 32, 2, 32, 32, {"z": True, "D": "hp", "dt_bias": True}),
    (2, 256, 8, 64, 1, 64, 64, {"D": "h", "dt_bias": True, "seq_idx": True}),
    (3, 77, 6, 64, 3, 128, 256, {"z": True, "D": "h", "initial_states": True}),
]


def arrays(rng, case, dtype):
    batch, seqlen, nheads, headdim, ngroups, dstate, _, opts = case
    f = lambda *shape, scale=1.0: jnp.asarray(rng.standard_normal(shape) * scale, dtype)  # noqa: E731
    out = {
        "x": f(batch, seqlen, nheads, headdim),
        "dt": jnp.asarray(rng.uniform(-3, 0, (batch, seqlen, nheads)), dtype),
        "A": -jnp.asarray(rng.uniform(0.5, 4, nheads), jnp.float32),
        "B": f(batch, seqlen, ngroups, dstate),
        "C": f(batch, seqlen, ngroups, dstate),
    }
    if opts.get("D"):
        out["D"] = jnp.asarray(rng.standard_normal((nheads,) if opts["D"] == "h" else (nheads, headdim)), jnp.float32)
    if opts.get("z"):
        out["z"] = f(batch, seqlen, nheads, headdim)
    if opts.get("dt_bias"):
        out["dt_bias"] = jnp.asarray(rng.uniform(-2, 0, nheads), jnp.float32)
    if opts.get("seq_idx"):
        cuts = np.sort(rng.integers(0, seqlen, (batch, 2)), axis=1)
        out["seq_idx"] = jnp.asarray((np.arange(seqlen)[None, :, None] >= cuts[:, None, :]).sum(-1), jnp.int32)
    if opts.get("initial_states"):
        out["initial_states"] = jnp.asarray(rng.standard_normal((batch, nheads, headdim, dstate)), jnp.float32)
    return out


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}L{c[1]}H{c[2]}P{c[3]}G{c[4]}N{c[5]}c{c[6]}")
def test_mamba_ssm_kernels_from_jax_match_the_reference_and_pytorch(cuda_reference, rng, case, dtype):
    pytest.importorskip("jax_triton")
    import torch

    import torch_reference.ssd_jax_triton  # noqa: F401  (registers the impl)
    from pallas_kernels.ssd.api import mamba_chunk_scan_combined

    chunk = case[6]
    inputs = arrays(rng, case, jnp.dtype(dtype))
    run = lambda impl: jax.jit(  # noqa: E731
        lambda a: mamba_chunk_scan_combined(
            a["x"], a["dt"], a["A"], a["B"], a["C"], chunk, D=a.get("D"), z=a.get("z"), dt_bias=a.get("dt_bias"),
            initial_states=a.get("initial_states"), seq_idx=a.get("seq_idx"), dt_softplus=True,
            return_final_states=True, impl=impl,
        )
    )(inputs)  # fmt: skip
    out, final = run("mamba_ssm_triton")
    ref_out, ref_final = run("reference")
    assert out.dtype == inputs["x"].dtype and out.shape == inputs["x"].shape and final.dtype == jnp.float32
    assert np.isfinite(np.asarray(out, np.float32)).all() and np.isfinite(np.asarray(final)).all()
    tol = 2e-2 if dtype == "float32" else 6e-2  # mamba-ssm's dots run in TF32 / bf16
    for name, got, want in (("out", out, ref_out), ("final_states", final, ref_final)):
        error = rel_err(got, want)
        assert error < tol, f"{name} against the reference: max error {error:.2e} of max |value| (tolerance {tol})"

    as_torch = {
        k: torch.from_numpy(np.asarray(v if k == "seq_idx" else v.astype(jnp.float32))).cuda()
        for k, v in inputs.items()
    }
    for k in ("x", "z", "B", "C", "dt"):
        if k in as_torch:
            as_torch[k] = as_torch[k].to(getattr(torch, dtype))
    torch_out, torch_final = cuda_reference.mamba_chunk_scan_combined(
        *(as_torch[k] for k in ("x", "dt", "A", "B", "C")), chunk, D=as_torch.get("D"), z=as_torch.get("z"),
        dt_bias=as_torch.get("dt_bias"), initial_states=as_torch.get("initial_states"),
        seq_idx=as_torch.get("seq_idx"), dt_softplus=True, return_final_states=True,
    )  # fmt: skip
    same = 1e-3 if dtype == "float32" else 1e-2  # the same kernels; autotuning may pick another tiling (TF32 sums)
    for name, got, want in (("out", out, torch_out), ("final_states", final, torch_final)):
        error = rel_err(got, want.float().cpu().numpy())
        assert error < same, f"{name} against mamba-ssm from PyTorch: max error {error:.2e} (tolerance {same})"
