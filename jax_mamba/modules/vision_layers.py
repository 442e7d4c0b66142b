"""Building blocks of vision models with PyTorch's semantics and parameter names: 2-D convolution (torch's init),
batch norm (torch's running statistics), stochastic depth. Images are channels last: (batch, H, W, channels)."""

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.init import torch_default_uniform
from jax_mamba.modules.layers import add_bias


class Conv2d(nnx.Module):
    """torch.nn.Conv2d over channels-last images: zero padding ``padding`` on every side, ``stride``, torch's default
    init (weight and bias U(+-1/sqrt(fan_in)), fan_in = in_channels * k * k). kernel is (k, k, in, out), torch's
    weight (out, in, k, k) permuted; float32 parameters, the convolution in ``dtype``, the bias added through
    ``add_bias`` (float32 gradient accumulation)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int = 1,
        padding: int = 0,
        bias: bool,
        dtype,
        rngs: nnx.Rngs,
    ):
        init = torch_default_uniform(in_channels * kernel_size * kernel_size)
        self.kernel = nnx.Param(init(rngs.params(), (kernel_size, kernel_size, in_channels, out_channels)))
        self.bias = nnx.Param(init(rngs.params(), (out_channels,))) if bias else None
        self.stride, self.padding, self.dtype = stride, padding, dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        """x (batch, H, W, in_channels) -> (batch, H', W', out_channels) in the compute dtype."""
        y = jax.lax.conv_general_dilated(
            x.astype(self.dtype),
            self.kernel[...].astype(self.dtype),
            window_strides=(self.stride, self.stride),
            padding=((self.padding, self.padding), (self.padding, self.padding)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return y if self.bias is None else add_bias(y, self.bias[...])


@partial(jax.custom_vjp, nondiff_argnums=(3,))
def batch_norm_train(
    x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float, keep: jax.Array | None = None
) -> tuple[jax.Array, ...]:
    """Batch norm by the batch's statistics over every axis but the last: (out in x's dtype, mean, biased variance),
    statistics float32. ``keep`` (bool, x.shape[:-1] + (1,)), if given, restricts the statistics to its rows and
    zeroes the output elsewhere: whatever the other rows hold, even inf or NaN, is selected away, never multiplied
    by 0. The backward is the closed form in two passes over (x, grad): one reduction (the sums of g and g * x_hat,
    per channel) and one elementwise pass, instead of what autodiff of the forward would chain."""
    return _batch_norm_fwd(x, weight, bias, eps, keep)[0]


def _kept(keep: jax.Array | None, h: jax.Array) -> jax.Array:
    return h if keep is None else jnp.where(keep, h, 0.0)


def _row_count(x: jax.Array, keep: jax.Array | None) -> jax.Array | int:
    return x.size // x.shape[-1] if keep is None else jnp.maximum(jnp.sum(keep, dtype=jnp.float32), 1.0)


def _batch_norm_fwd(x, weight, bias, eps, keep):
    h = x.astype(jnp.float32)
    axes = tuple(range(x.ndim - 1))
    count = _row_count(x, keep)
    mean = jnp.sum(_kept(keep, h), axis=axes) / count
    var = jnp.sum(_kept(keep, jnp.square(h - mean)), axis=axes) / count  # two passes: E[x^2] - mean^2 cancels
    rstd = jax.lax.rsqrt(var + eps)
    out = _kept(keep, (h - mean) * (weight * rstd) + bias).astype(x.dtype)
    return (out, mean, var), (x, mean, rstd, weight, keep, count)


def _batch_norm_bwd(eps, residuals, cotangents):
    x, mean, rstd, weight, keep, count = residuals
    g = _kept(keep, cotangents[0].astype(jnp.float32))  # mean and var feed only the (non-differentiated) running stats
    axes = tuple(range(x.ndim - 1))
    x_hat = _kept(keep, (x.astype(jnp.float32) - mean) * rstd)
    sum_g, sum_g_xhat = jnp.sum(g, axis=axes), jnp.sum(g * x_hat, axis=axes)
    dx = _kept(keep, (weight * rstd) * (g - (sum_g + x_hat * sum_g_xhat) / count))
    return dx.astype(x.dtype), sum_g_xhat, sum_g, None


batch_norm_train.defvjp(_batch_norm_fwd, _batch_norm_bwd)


def masked_batch_norm_train(
    x: jax.Array, mask: jax.Array, weight: jax.Array, bias: jax.Array, eps: float
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Batch norm by the statistics of the rows where ``mask`` (x.shape[:-1]) is 1: (out in x's dtype, zero on the
    other rows; mean; biased variance; row count), statistics float32. What the other rows hold, even inf or NaN,
    reaches neither the statistics, the output nor any gradient."""
    keep = (mask > 0)[..., None]
    out, mean, var = batch_norm_train(x, weight, bias, eps, keep)
    return out, mean, var, jnp.sum(keep, dtype=jnp.float32)


class BatchNorm(nnx.Module):
    """torch.nn.BatchNorm{1,2}d over the last (channel) axis: weight ones, bias zeros.

    Training (``use_running_average=False``, the default): normalizes by the batch's mean and biased variance over
    every axis but the last (:func:`batch_norm_train`), and updates ``running_mean``/``running_var`` (unbiased
    variance) with ``momentum`` and ``num_batches_tracked``, as torch does. Eval (``.eval()``): normalizes by the
    running statistics. Statistics are float32; the output has the input's dtype. The running statistics are
    ``nnx.BatchStat`` state, not parameters (``ParamLayout`` keeps them apart)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        self.weight = nnx.Param(jnp.ones((num_features,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((num_features,), jnp.float32))
        self.running_mean = nnx.BatchStat(jnp.zeros((num_features,), jnp.float32))
        self.running_var = nnx.BatchStat(jnp.ones((num_features,), jnp.float32))
        self.num_batches_tracked = nnx.BatchStat(jnp.zeros((), jnp.int32))
        self.eps, self.momentum = eps, momentum
        self.use_running_average = False

    @jax.named_scope("batch_norm")
    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """x (..., channels) -> the same shape and dtype. ``mask`` (x.shape[:-1], 1 = real) restricts the training
        statistics to the real rows (padded graph batches: padding never shifts a real row's output) and, in
        training and eval alike, writes zeros on the other rows."""
        if self.use_running_average:
            scale = self.weight[...] * jax.lax.rsqrt(self.running_var[...] + self.eps)
            out = (x.astype(jnp.float32) - self.running_mean[...]) * scale + self.bias[...]
            return (out if mask is None else _kept((mask > 0)[..., None], out)).astype(x.dtype)
        if mask is not None:
            out, mean, var, count = masked_batch_norm_train(x, mask, self.weight[...], self.bias[...], self.eps)
        else:
            count = x.size // x.shape[-1]
            if count < 2:
                raise ValueError(f"BatchNorm in training needs more than one value per channel, got input {x.shape}")
            out, mean, var = batch_norm_train(x, self.weight[...], self.bias[...], self.eps)
        m = self.momentum
        self.running_mean[...] = (1 - m) * self.running_mean[...] + m * jax.lax.stop_gradient(mean)
        unbiased = jax.lax.stop_gradient(var) * (count / jnp.maximum(count - 1, 1))
        self.running_var[...] = (1 - m) * self.running_var[...] + m * unbiased
        self.num_batches_tracked[...] = self.num_batches_tracked[...] + 1
        return out


class DropPath(nnx.Module):
    """Stochastic depth (timm's ``DropPath``): in training, zero a whole sample's branch with probability ``rate``
    and scale the kept ones by 1 / (1 - rate); identity in eval (``.eval()``) or at rate 0. The random draw takes
    the ``dropout`` stream of the ``rngs`` passed at call time."""

    def __init__(self, rate: float):
        self.rate = rate
        self.deterministic = False

    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        if self.rate == 0.0 or self.deterministic:
            return x
        if rngs is None:
            raise ValueError("DropPath in training needs rngs with a 'dropout' stream (or call .eval())")
        keep = 1.0 - self.rate
        mask = jax.random.bernoulli(rngs.dropout(), keep, (x.shape[0],) + (1,) * (x.ndim - 1))
        return jnp.where(mask, x / jnp.asarray(keep, x.dtype), jnp.zeros((), x.dtype))
