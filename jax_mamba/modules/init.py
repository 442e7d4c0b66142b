"""Initializers reproducing PyTorch/mamba-ssm's parameter distributions (mamba-ssm inherits torch defaults)."""

import math

import jax
import jax.numpy as jnp


def torch_default_uniform(fan_in: int, scale: float = 1.0):
    """torch's Linear/Conv default (kaiming_uniform with a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)) * scale."""
    bound = scale / math.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def uniform(low: float, high: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, low, high)

    return init


def dt_bias_init(dt_min: float, dt_max: float, dt_init_floor: float):
    """Inverse softplus of dt ~ log-uniform[dt_min, dt_max] (clamped below at dt_init_floor), so that
    softplus(bias) starts at that dt."""

    def init(key, shape, dtype=jnp.float32):
        log_dt = jax.random.uniform(key, shape, jnp.float32, math.log(dt_min), math.log(dt_max))
        dt = jnp.maximum(jnp.exp(log_dt), dt_init_floor)
        return (dt + jnp.log(-jnp.expm1(-dt))).astype(dtype)

    return init


def trunc_normal(std: float, low: float = -2.0, high: float = 2.0):
    """timm's ``trunc_normal_(std=std)``: normal(0, std) truncated to the absolute range [low, high] (not to
    multiples of std, which ``nnx.initializers.truncated_normal`` uses)."""

    def init(key, shape, dtype=jnp.float32):
        return (jax.random.truncated_normal(key, low / std, high / std, shape, jnp.float32) * std).astype(dtype)

    return init
