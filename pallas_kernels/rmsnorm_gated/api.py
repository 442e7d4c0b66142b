"""Public gated RMSNorm: mamba-ssm's ``rmsnorm_fn`` (ops/triton/layernorm_gated.py) names and argument order."""

import jax

from pallas_kernels._checks import check_array, check_config, check_divides, check_impl, check_shape
from pallas_kernels._triton import gpu_sm_count, interpret_mode
from pallas_kernels.rmsnorm_gated import reference, vjp
from pallas_kernels.rmsnorm_gated.config import NormConfig

_AVAILABLE_IMPLS = ("reference", "pallas")


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
    config: NormConfig | None = None,
) -> jax.Array:
    """RMSNorm over the last axis (per group of ``group_size`` channels), optionally gated by silu(z).

    x, z (..., dim); weight, bias (dim,). ``norm_before_gate=True``: rmsnorm(x) * w (+ b), then * silu(z);
    ``False`` (Mamba-2's choice): rmsnorm(x * silu(z)) * w (+ b). float32 statistics; out has x's dtype.

    ``impl="pallas"`` runs the Pallas Triton kernels (interpreted when JAX has no GPU): one pass over x and z
    forward, one backward pass that recomputes the statistics (only x and z are kept) and writes dx and dz, with dw
    and db summed from per-program partials. ``config`` sets its tiling (``NormConfig``).
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
    if impl == "pallas" and x.size:
        check_config(config, NormConfig)
        group = dim if group_size is None else group_size
        config = config or NormConfig()
        args = (float(eps), group, bool(norm_before_gate), config, gpu_sm_count(), interpret_mode())
        return vjp.rmsnorm(x, weight, bias, z, *args)
    return reference.rmsnorm(x, weight, bias, z, float(eps), group_size, bool(norm_before_gate))
