"""MambaVision's token mixer: NVlabs' ``MambaVisionMixer`` (names, shapes, initialization, forward math)."""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.impl import op_impl
from jax_mamba.modules.init import dt_bias_init, torch_default_uniform, uniform
from jax_mamba.modules.layers import linear
from pallas_kernels import selective_scan_fn


def depthwise_conv1d_same(x: jax.Array, weight: jax.Array) -> jax.Array:
    """Non-causal depthwise conv over time, torch's ``F.conv1d(..., padding='same', groups=channels)`` without bias.

    x (batch, L, channels); weight (channels, width). out[t] = sum_k weight[:, k] * x[t + k - (width - 1) // 2],
    with zeros outside [0, L). Accumulates in float32; returns x's dtype."""
    width = weight.shape[1]
    left = (width - 1) // 2
    padded = jnp.pad(x.astype(jnp.float32), ((0, 0), (left, width - 1 - left), (0, 0)))
    length = x.shape[1]
    w = weight.astype(jnp.float32)
    out = sum(padded[:, k : k + length] * w[:, k] for k in range(width))
    return out.astype(x.dtype)


class DepthwiseConv1d(nnx.Module):
    """The weight of a bias-free depthwise ``nn.Conv1d`` used through :func:`depthwise_conv1d_same`: ``weight``
    (channels, width) = torch's (channels, 1, width) squeezed, torch's init U(+-1/sqrt(width))."""

    def __init__(self, channels: int, width: int, *, rngs: nnx.Rngs):
        self.weight = nnx.Param(torch_default_uniform(width)(rngs.params(), (channels, width)))

    def __call__(self, x: jax.Array) -> jax.Array:
        return depthwise_conv1d_same(x, self.weight[...])


class MambaVisionMixer(nnx.Module):
    """in_proj -> [x, z] (d_inner / 2 channels each); x -> non-causal depthwise conv + SiLU -> x_proj -> [dt, B, C];
    dt -> dt_proj (Linear, bias included) and the selective scan adds dt_proj.bias again as delta_bias, softplus
    inside, D skip, no gating; z -> its own non-causal conv + SiLU (no scan); out_proj([y, z]).

    dt_proj's bias entering twice is NVlabs' forward as published, kept so that their weights compute the same
    function here. Their ``conv_bias // 2`` gives bias-free convs for either value of conv_bias, so there is none.

    Parameters: in_proj.kernel (d_model, d_inner), conv1d_x.weight / conv1d_z.weight (d_inner / 2, d_conv),
    x_proj.kernel (d_inner / 2, dt_rank + 2 d_state), dt_proj.kernel (dt_rank, d_inner / 2), dt_proj.bias,
    A_log (d_inner / 2, d_state), D (d_inner / 2,), out_proj.kernel (d_inner, d_model).
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: float = 2,
        dt_rank: int | str = "auto",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init: str = "random",
        dt_scale: float = 1.0,
        dt_init_floor: float = 1e-4,
        bias: bool = False,
        *,
        dtype=jnp.float32,
        impl: str = "auto",
        scan_backend: str = "triton",
        rngs: nnx.Rngs,
    ):
        self.d_model, self.d_state, self.d_conv = d_model, d_state, d_conv
        self.d_inner = int(expand * d_model)
        half = self.d_inner // 2
        self.dt_rank = math.ceil(d_model / 16) if dt_rank == "auto" else dt_rank
        self.impl = impl
        self.scan_backend = scan_backend  # the Pallas scan's kernels (selective_scan_fn's backend)
        self.in_proj = linear(d_model, self.d_inner, bias=bias, dtype=dtype, rngs=rngs)
        self.x_proj = linear(half, self.dt_rank + 2 * d_state, bias=False, dtype=dtype, rngs=rngs)
        self.dt_proj = linear(self.dt_rank, half, bias=True, dtype=dtype, rngs=rngs)
        std = self.dt_rank**-0.5 * dt_scale
        if dt_init == "constant":
            self.dt_proj.kernel[...] = jnp.full((self.dt_rank, half), std, jnp.float32)
        elif dt_init == "random":
            self.dt_proj.kernel[...] = uniform(-std, std)(rngs.params(), (self.dt_rank, half))
        else:
            raise ValueError(f"dt_init must be 'random' or 'constant', got {dt_init!r}")
        self.dt_proj.bias[...] = dt_bias_init(dt_min, dt_max, dt_init_floor)(rngs.params(), (half,))
        A = jnp.broadcast_to(jnp.arange(1, d_state + 1, dtype=jnp.float32), (half, d_state))
        self.A_log = nnx.Param(jnp.log(A))
        self.D = nnx.Param(jnp.ones((half,), jnp.float32))
        self.out_proj = linear(self.d_inner, d_model, bias=bias, dtype=dtype, rngs=rngs)
        self.conv1d_x = DepthwiseConv1d(half, d_conv, rngs=rngs)
        self.conv1d_z = DepthwiseConv1d(half, d_conv, rngs=rngs)

    @jax.named_scope("mamba_vision_mixer")
    def __call__(self, hidden_states: jax.Array) -> jax.Array:
        """hidden_states (batch, L, d_model) -> (batch, L, d_model) in the compute dtype."""
        x, z = jnp.split(self.in_proj(hidden_states), 2, axis=-1)
        x = jax.nn.silu(self.conv1d_x(x))
        z = jax.nn.silu(self.conv1d_z(z))
        dt, B, C = jnp.split(self.x_proj(x), [self.dt_rank, self.dt_rank + self.d_state], axis=-1)
        dt = self.dt_proj(dt)
        y = selective_scan_fn(
            x,
            dt,
            -jnp.exp(self.A_log[...]),
            B[:, :, None, :],
            C[:, :, None, :],
            self.D[...],
            None,
            delta_bias=self.dt_proj.bias[...],
            delta_softplus=True,
            impl=op_impl(self.impl, selective_scan_fn),
            backend=self.scan_backend,
        )
        return self.out_proj(jnp.concatenate([y, z], axis=-1))
