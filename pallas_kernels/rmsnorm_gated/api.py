"""Public gated RMSNorm: mamba-ssm's ``rmsnorm_fn`` (ops/triton/layernorm_gated.py) names and argument order."""

import jax

from pallas_kernels._checks import check_array, check_divides, check_impl, check_shape
from pallas_kernels.rmsnorm_gated import reference

_AVAILABLE_IMPLS = ("reference",)


def rmsnorm_fn(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None = None,
    z: jax.Array | None = None,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool = True,
    *,
    impl: str = "reference",
) -> jax.Array:
    """RMSNorm over the last axis (per group of ``group_size`` channels), optionally gated by silu(z).

    x, z (..., dim); weight, bias (dim,). ``norm_before_gate=True``: rmsnorm(x) * w (+ b), then * silu(z);
    ``False`` (Mamba-2's choice): rmsnorm(x * silu(z)) * w (+ b). float32 statistics; out has x's dtype.
    """
    check_impl("rmsnorm_fn", impl, _AVAILABLE_IMPLS)
    check_array("x", x, tuple(range(1, 9)))
    dim = x.shape[-1]
    check_array("weight", weight, 1)
    check_shape("weight", weight, (dim,), "(dim,)")
    if bias is not None:
        check_array("bias", bias, 1)
        check_shape("bias", bias, (dim,), "(dim,)")
    if z is not None:
        check_array("z", z, x.ndim)
        check_shape("z", z, x.shape, "like x")
    if group_size is not None:
        check_divides("group_size", dim, group_size, "dim")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    return reference.rmsnorm(x, weight, bias, z, float(eps), group_size, bool(norm_before_gate))
