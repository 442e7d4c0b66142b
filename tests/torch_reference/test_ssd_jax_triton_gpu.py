"""impl="mamba_ssm_triton" on the GPU: mamba-ssm's Triton SSD forward and backward launched from JAX against the
pure-JAX reference (``impl="reference"``, its gradients by autodiff) and against mamba-ssm launched by PyTorch on the
same values and cotangents, on random shapes including length 1, lengths that are not multiples of the chunk,
several head groups, D per head and per channel, z, dt_bias, seq_idx and initial states. Outputs and every gradient
must be finite. Needs a GPU, mamba-ssm's build and jax-triton."""

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
def test_mamba_ssm_kernels_from_jax_match_the_reference_and_pytorch(cuda_triton_reference, rng, case, dtype):
    pytest.importorskip("jax_triton")
    import torch

    import torch_reference.ssd_jax_triton  # noqa: F401  (registers the impl)
    from pallas_kernels.ssd.api import mamba_chunk_scan_combined

    chunk = case[6]
    inputs = arrays(rng, case, jnp.dtype(dtype))
    dout = jnp.asarray(rng.standard_normal(inputs["x"].shape), inputs["x"].dtype)
    dfinal = jnp.asarray(rng.standard_normal((case[0], case[2], case[3], case[5])), jnp.float32)
    differentiable = [k for k in inputs if k != "seq_idx"]

    def run(impl):
        def f(diff):
            a = {**inputs, **diff}
            return mamba_chunk_scan_combined(
                a["x"], a["dt"], a["A"], a["B"], a["C"], chunk, D=a.get("D"), z=a.get("z"), dt_bias=a.get("dt_bias"),
                initial_states=a.get("initial_states"), seq_idx=a.get("seq_idx"), dt_softplus=True,
                return_final_states=True, impl=impl,
            )  # fmt: skip

        (out, final), pullback = jax.vjp(f, {k: inputs[k] for k in differentiable})
        return out, final, pullback((dout, dfinal))[0]

    out, final, grads = jax.jit(lambda: run("mamba_ssm_triton"))()
    ref_out, ref_final, ref_grads = jax.jit(lambda: run("reference"))()
    assert out.dtype == inputs["x"].dtype and out.shape == inputs["x"].shape and final.dtype == jnp.float32
    for name, value in (("out", out), ("final_states", final), *((f"d{k}", g) for k, g in grads.items())):
        assert np.isfinite(np.asarray(value, np.float32)).all(), f"{name} is not finite"
    for k, g in grads.items():
        assert g.shape == inputs[k].shape and g.dtype == inputs[k].dtype, f"d{k}: {g.shape} {g.dtype}"
    tol = 2e-2 if dtype == "float32" else 6e-2  # mamba-ssm's dots run in TF32 / bf16
    grad_tol = 3e-2 if dtype == "float32" else 1e-1  # bf16 dstates and states feed the backward's dots
    checks = [("out", out, ref_out, tol), ("final_states", final, ref_final, tol)]
    checks += [(f"d{k}", grads[k], ref_grads[k], grad_tol) for k in differentiable]
    for name, got, want, limit in checks:
        error = rel_err(got, want)
        assert error < limit, f"{name} against the reference: max error {error:.2e} of max |value| (limit {limit})"

    as_torch = {
        k: torch.from_numpy(np.asarray(v if k == "seq_idx" else v.astype(jnp.float32))).cuda()
        for k, v in inputs.items()
    }
    for k in ("x", "z", "B", "C", "dt"):
        if k in as_torch:
            as_torch[k] = as_torch[k].to(getattr(torch, dtype))
    for k in differentiable:
        as_torch[k].requires_grad_(True)
    torch_out, torch_final = cuda_triton_reference.mamba_chunk_scan_combined(
        *(as_torch[k] for k in ("x", "dt", "A", "B", "C")), chunk, D=as_torch.get("D"), z=as_torch.get("z"),
        dt_bias=as_torch.get("dt_bias"), initial_states=as_torch.get("initial_states"),
        seq_idx=as_torch.get("seq_idx"), dt_softplus=True, return_final_states=True,
    )  # fmt: skip
    to_torch = lambda a: torch.from_numpy(np.asarray(a.astype(jnp.float32))).cuda()  # noqa: E731
    torch.autograd.backward((torch_out, torch_final), (to_torch(dout).to(torch_out.dtype), to_torch(dfinal)))
    # the same kernels; autotuning may pick another tiling (TF32 sums), atomics add in another order
    same = 1e-3 if dtype == "float32" else 1e-2
    same_grad = 5e-3 if dtype == "float32" else 3e-2
    checks = [("out", out, torch_out, same), ("final_states", final, torch_final, same)]
    checks += [(f"d{k}", grads[k], as_torch[k].grad, same_grad) for k in differentiable]
    for name, got, want, limit in checks:
        error = rel_err(got, want.float().detach().cpu().numpy())
        assert error < limit, f"{name} against mamba-ssm from PyTorch: max error {error:.2e} (limit {limit})"
