"""Building blocks with mamba-ssm's parameter names and torch's initial distributions: Linear, Embedding, norms,
depthwise causal conv. Parameters are float32; ``dtype`` is the compute dtype."""

import functools
import itertools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.context_parallel import causal_conv_across_context
from jax_mamba.modules.impl import op_impl
from jax_mamba.modules.init import torch_default_uniform, uniform
from jax_mamba.modules.per_device import context_size, per_device
from jax_mamba.modules.weight_grads import tie_weight_grad
from pallas_kernels import causal_conv1d_fn, matmul_few_rows, rmsnorm_fn

# Linear layers with at most this many rows use the few-rows matmul kernel. Measured on an H100 decoding Mamba-2 780m
# (benchmarks/decode/): 1 row 600 against 318 tokens/s with XLA's dot (which it turns into a reduction at one row);
# 8, 16, 32 and 64 rows 1-8% slower than XLA's dot, which is a GEMM there.
FEW_ROWS = 7


@jax.custom_vjp
def add_bias(y: jax.Array, bias: jax.Array) -> jax.Array:
    """y (..., features) in the compute dtype + bias (features,): the sum in y's dtype, as torch's autocast does.

    Its backward sums the output gradient over every leading position in float32 (torch accumulates there too), not
    in the compute dtype: a bias gradient is a sum over the whole batch, which bf16 accumulation would degrade."""
    return y + bias.astype(y.dtype)


def _add_bias_fwd(y, bias):
    return add_bias(y, bias), jnp.zeros((0,), bias.dtype)


def _add_bias_bwd(bias_dtype, g):
    reduced = jnp.sum(g.astype(jnp.float32), axis=tuple(range(g.ndim - 1)))
    return g, reduced.astype(bias_dtype.dtype)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)


class Linear(nnx.Module):
    """torch.nn.Linear: kernel (in, out) = weight.T and bias (out,), float32 parameters; the matmul in ``dtype``
    (the compute dtype), the bias added through :func:`add_bias`. With at most ``FEW_ROWS`` rows (decoding) and the
    Pallas kernels (``impl``), the matmul is ``matmul_few_rows``, which reads the kernel at memory bandwidth where
    XLA's dot, turned into a reduction at such shapes, does not. Inside ``weight_grads.early_weight_grads()`` the
    backward releases the input's gradient only with the kernel's (``mesh.grad_reduce="early"``)."""

    def __init__(
        self, in_features: int, out_features: int, *, bias: bool, dtype, kernel_init, rngs: nnx.Rngs, impl="auto"
    ):
        self.kernel = nnx.Param(kernel_init(rngs.params(), (in_features, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((out_features,), jnp.float32)) if bias else None
        self.dtype, self.impl = dtype, impl

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self._matmul(*tie_weight_grad(x.astype(self.dtype), self.kernel[...].astype(self.dtype)))
        return y if self.bias is None else add_bias(y, self.bias[...])

    def split(self, x: jax.Array, sizes: Sequence[int]) -> list[jax.Array]:
        """The output's consecutive column blocks of ``sizes`` (summing to out_features) as separate arrays, each
        from its own matmul against its columns of the kernel: the values of ``jnp.split(self(x), ...)`` without
        its copies. Where a block goes to a Pallas kernel, XLA would copy the slice of one output into a buffer of
        its own, and the backward would concatenate the blocks' gradients before in_proj's (33 ms of a 315 ms
        mamba2-780m step on an H100 in a profile; for Mamba-1's two blocks the matmuls' weight casts and the weight
        gradient's concatenation cost about what the copies did: benchmarks/README.md). Blocks narrower than x take
        x through an optimization barrier, a distinct operand, so that XLA's dot merger does not fuse their small
        matmuls into a wide one, which would bring the slice back."""
        if sum(sizes) != self.kernel.shape[1] or min(sizes, default=0) < 0:
            raise ValueError(f"sizes must be >= 0 and sum to out_features={self.kernel.shape[1]}, got {list(sizes)}")
        x, w = tie_weight_grad(x.astype(self.dtype), self.kernel[...].astype(self.dtype))
        narrow = jax.lax.optimization_barrier(x) if any(0 < n < x.shape[-1] for n in sizes) else x
        bounds = [0, *itertools.accumulate(sizes)]
        parts = []
        for start, stop in itertools.pairwise(bounds):
            if start == stop:  # e.g. Mamba-2's MLP part when d_ssm = d_inner
                parts.append(jnp.zeros((*x.shape[:-1], 0), x.dtype))
                continue
            y = self._matmul(narrow if stop - start < x.shape[-1] else x, w[:, start:stop])
            parts.append(y if self.bias is None else add_bias(y, self.bias[...][start:stop]))
        return parts

    def _matmul(self, x: jax.Array, w: jax.Array) -> jax.Array:
        impl = op_impl(self.impl, matmul_few_rows)
        if impl == "pallas" and math.prod(x.shape[:-1]) <= FEW_ROWS:
            rows = lambda x, w: matmul_few_rows(x.reshape(-1, w.shape[0]), w, impl=impl).reshape(*x.shape[:-1], -1)  # noqa: E731
            return per_device(rows, impl, (True, False), True, x, w)
        return jnp.dot(x, w)


def linear(
    in_features: int, out_features: int, *, bias: bool, dtype, rngs: nnx.Rngs, kernel_init=None, impl: str = "auto"
) -> Linear:
    """torch.nn.Linear under mamba-ssm's init: kernel U(+-1/sqrt(in)) unless ``kernel_init`` is given, bias zeros."""
    init = kernel_init or torch_default_uniform(in_features)
    return Linear(in_features, out_features, bias=bias, dtype=dtype, kernel_init=init, rngs=rngs, impl=impl)


class Embedding(nnx.Embed):
    """``nnx.Embed`` whose lookup gathers rows of the float32 table and casts only them to ``dtype``: the gradient is
    then a float32 scatter-add (native atomics). Casting the whole table first, as ``nnx.Embed`` does, makes it a
    bfloat16 scatter-add, which a GPU runs as compare-and-swap loops (38 ms of a 108 ms mamba2-130m step on an H100,
    batch 8 x 2048) besides rounding each partial sum."""

    def __call__(self, inputs: jax.Array) -> jax.Array:
        """inputs (...) integer ids -> (..., features) in ``dtype``."""
        if not jnp.issubdtype(inputs.dtype, jnp.integer):
            raise ValueError(f"Embedding: input ids must be integers, got {inputs.dtype}")
        return jnp.take(self.embedding[...], inputs, axis=0).astype(self.dtype or self.param_dtype)


def embedding(num_embeddings: int, features: int, *, std: float, dtype, rngs: nnx.Rngs) -> Embedding:
    return Embedding(
        num_embeddings,
        features,
        dtype=dtype,
        param_dtype=jnp.float32,
        embedding_init=nnx.initializers.normal(std),
        rngs=rngs,
    )


class RMSNorm(nnx.Module):
    """RMSNorm over the last axis with a float32 weight; statistics in float32; output has the input's dtype.
    Rematerialized: the backward recomputes the norm from its input, so only the input is kept for it (as
    mamba-ssm's fused norm kernel keeps the input and 1/rms), not its float32 intermediates.

    Always the reference: XLA fuses it with the residual add before it and the casts around it, which a Pallas
    kernel cannot join (mamba1-790m on an H100, batch 4 x 2048: 2.3 ms a step in XLA's fusions against 4.5 ms for
    the Pallas norm's two kernels). ``impl`` is kept for the model's switch and unused."""

    def __init__(self, dim: int, eps: float = 1e-5, *, impl: str = "auto"):
        self.weight = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.eps = eps
        self.impl = impl

    @jax.named_scope("rms_norm")
    def __call__(self, x: jax.Array) -> jax.Array:
        norm = functools.partial(rmsnorm_fn, eps=self.eps, impl="reference")
        return jax.checkpoint(norm)(x, self.weight[...])


class LayerNorm(nnx.Module):
    """LayerNorm over the last axis (weight and bias, float32 statistics); for ``rms_norm=False`` configs."""

    def __init__(self, dim: int, eps: float = 1e-5, **_):
        self.weight = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((dim,), jnp.float32))
        self.eps = eps

    @jax.named_scope("layer_norm")
    def __call__(self, x: jax.Array) -> jax.Array:
        h = x.astype(jnp.float32)
        mean = jnp.mean(h, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(h - mean), axis=-1, keepdims=True)
        out = (h - mean) * jax.lax.rsqrt(var + self.eps) * self.weight[...] + self.bias[...]
        return out.astype(x.dtype)


class RMSNormGated(nnx.Module):
    """mamba-ssm's gated RMSNorm (``ops.triton.layernorm_gated.RMSNorm``): weight ones, no bias. The backward keeps
    x and z, not the float32 intermediates (five (batch, L, dim) float32 arrays per Mamba-2 layer otherwise): the
    Pallas kernel's backward recomputes the statistics, the reference is rematerialized. Here XLA's fusions of the
    reference are slow (about 31 ms of a 315 ms mamba2-780m step on an H100, batch 8 x 2048), the Pallas kernels
    run at their memory floor (``compare.kernels --op rmsnorm_gated``)."""

    def __init__(
        self,
        dim: int,
        eps: float = 1e-5,
        group_size: int | None = None,
        norm_before_gate: bool = True,
        *,
        impl: str = "auto",
    ):
        self.weight = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.eps = eps
        self.group_size = group_size
        self.norm_before_gate = norm_before_gate
        self.impl = impl

    @jax.named_scope("rms_norm_gated")
    def __call__(self, x: jax.Array, z: jax.Array | None = None) -> jax.Array:
        impl = op_impl(self.impl, rmsnorm_fn)
        norm = functools.partial(
            rmsnorm_fn, eps=self.eps, group_size=self.group_size, norm_before_gate=self.norm_before_gate, impl=impl
        )
        run = functools.partial(per_device, lambda x, w, z: norm(x, w, None, z), impl, (True, False, True), True)
        return run(x, self.weight[...], z) if impl == "pallas" else jax.checkpoint(run)(x, self.weight[...], z)


class CausalConv1d(nnx.Module):
    """Depthwise causal conv over (batch, L, channels). ``weight`` is (channels, width) = torch's (c, 1, w)
    squeezed; torch's default init U(+-1/sqrt(width)) for weight and bias (``weight_bound`` overrides the weight's).
    Rematerialized: the backward recomputes the conv (and its activation) from the input, so only the input is kept
    for it, not the float32 taps and activation (with RMSNorm's, Mamba-1 370m's peak at batch 8 x 2048 on an H100
    went from 37.4 to 32.9 GiB)."""

    def __init__(
        self,
        channels: int,
        width: int,
        *,
        bias: bool,
        rngs: nnx.Rngs,
        impl: str = "auto",
        weight_bound: float | None = None,
    ):
        weight_init = torch_default_uniform(width) if weight_bound is None else uniform(-weight_bound, weight_bound)
        self.weight = nnx.Param(weight_init(rngs.params(), (channels, width)))
        self.bias = nnx.Param(torch_default_uniform(width)(rngs.params(), (channels,))) if bias else None
        self.impl = impl

    @jax.named_scope("causal_conv1d")
    def __call__(
        self,
        x: jax.Array,
        *,
        activation: str | None = None,
        seq_idx: jax.Array | None = None,
        channels: tuple[int, int] | None = None,
    ) -> jax.Array:
        """x (batch, L, channels) -> the conv (batch, L, channels); ``channels`` (start, stop) runs the conv's
        channels start..stop - 1 only, x holding just those (Mamba-2 convolves x apart from B and C)."""
        start, stop = channels or (0, self.weight.shape[0])
        weight = self.weight[...][start:stop]
        bias = None if self.bias is None else self.bias[...][start:stop]
        impl = op_impl(self.impl, causal_conv1d_fn)
        conv = functools.partial(causal_conv1d_fn, activation=activation, impl=impl)
        if context_size() > 1:  # positions split over devices: each receives its predecessor's last inputs
            if seq_idx is not None:
                raise ValueError("context parallelism does not take packed sequences (seq_idx)")
            return jax.checkpoint(functools.partial(causal_conv_across_context, conv))(x, weight, bias)
        run = lambda x, w, b, s: per_device(  # noqa: E731
            lambda x, w, b, s: conv(x, w, b, seq_idx=s), impl, (True, False, False, True), True, x, w, b, s
        )
        return jax.checkpoint(run)(x, weight, bias, seq_idx)

    def with_state(
        self, x: jax.Array, state: jax.Array | None = None, *, activation: str | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Inference: the conv of x (batch, L, channels) continuing from ``state`` (batch, width - 1, channels), the
        last inputs before x (zeros when None), and the state after x. Prefill passes the prompt, decoding one
        position at a time. Always the reference conv (the decoding benchmarks measure it so; the Pallas kernel takes
        states too, for context parallelism)."""
        bias = None if self.bias is None else self.bias[...]
        return causal_conv1d_fn(
            x, self.weight[...], bias, initial_states=state, return_final_states=True, activation=activation
        )
