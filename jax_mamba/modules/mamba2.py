"""Mamba-2 mixer: mamba-ssm's ``modules/mamba2.Mamba2`` (names, shapes, initialization, non-fused forward math)."""

import math

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.impl import op_impl
from jax_mamba.modules.init import dt_bias_init, uniform
from jax_mamba.modules.layers import CausalConv1d, RMSNormGated, linear
from pallas_kernels import mamba_chunk_scan_combined


class Mamba2(nnx.Module):
    """in_proj -> [z0, x0, z, xBC, dt]; xBC -> causal conv + SiLU -> [x, B, C]; SSD scan (dt_bias, softplus,
    dt_limit, D); gated RMSNorm with z (or silu(z) gating without rmsnorm); the optional MLP part silu(z0) * x0 is
    concatenated in front; out_proj.

    Parameters: in_proj.kernel (d_model, 2 d_inner + 2 G N + H), conv1d.weight (d_ssm + 2 G N, d_conv), conv1d.bias,
    dt_bias (H,), A_log (H,), D (H,) or (d_ssm,), norm.weight (d_ssm,), out_proj.kernel (d_inner, d_model).
    H = d_ssm / headdim heads, G = ngroups, N = d_state.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 128,
        d_conv: int = 4,
        conv_init: float | None = None,
        expand: int = 2,
        headdim: int = 64,
        d_ssm: int | None = None,
        ngroups: int = 1,
        A_init_range: tuple[float, float] = (1.0, 16.0),
        D_has_hdim: bool = False,
        rmsnorm: bool = True,
        norm_before_gate: bool = False,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        dt_limit: tuple[float, float] = (0.0, math.inf),
        bias: bool = False,
        conv_bias: bool = True,
        chunk_size: int = 256,
        *,
        dtype=jnp.float32,
        impl: str = "auto",
        rngs: nnx.Rngs,
    ):
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.d_inner = expand * d_model
        self.d_ssm = self.d_inner if d_ssm is None else d_ssm
        self.headdim, self.ngroups = headdim, ngroups
        self.nheads = self.d_ssm // headdim
        self.D_has_hdim, self.rmsnorm = D_has_hdim, rmsnorm
        self.dt_limit = tuple(dt_limit)
        self.chunk_size = chunk_size
        self.impl = impl
        d_in_proj = 2 * self.d_inner + 2 * ngroups * d_state + self.nheads
        self.in_proj = linear(d_model, d_in_proj, bias=bias, dtype=dtype, rngs=rngs)
        conv_dim = self.d_ssm + 2 * ngroups * d_state
        self.conv1d = CausalConv1d(conv_dim, d_conv, bias=conv_bias, rngs=rngs, impl=impl, weight_bound=conv_init)
        self.dt_bias = nnx.Param(dt_bias_init(dt_min, dt_max, dt_init_floor)(rngs.params(), (self.nheads,)))
        self.A_log = nnx.Param(jnp.log(uniform(*A_init_range)(rngs.params(), (self.nheads,))))
        self.D = nnx.Param(jnp.ones((self.d_ssm if D_has_hdim else self.nheads,), jnp.float32))
        if rmsnorm:
            self.norm = RMSNormGated(
                self.d_ssm, eps=1e-5, group_size=self.d_ssm // ngroups, norm_before_gate=norm_before_gate, impl=impl
            )
        self.out_proj = linear(self.d_inner, d_model, bias=bias, dtype=dtype, rngs=rngs)

    def __call__(self, hidden_states: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        """hidden_states (batch, L, d_model) -> (batch, L, d_model); seq_idx int (batch, L) for packed sequences."""
        batch, seqlen, _ = hidden_states.shape
        gn = self.ngroups * self.d_state
        d_mlp = self.d_inner - self.d_ssm
        zxbcdt = self.in_proj(hidden_states)
        z0, x0, z, xBC, dt = jnp.split(
            zxbcdt, [d_mlp, 2 * d_mlp, 2 * d_mlp + self.d_ssm, 2 * d_mlp + 2 * self.d_ssm + 2 * gn], axis=-1
        )
        xBC = self.conv1d(xBC, activation="silu", seq_idx=seq_idx)
        x, B, C = jnp.split(xBC, [self.d_ssm, self.d_ssm + gn], axis=-1)
        A = -jnp.exp(self.A_log[...].astype(jnp.float32))
        D = self.D[...].reshape(self.nheads, self.headdim) if self.D_has_hdim else self.D[...]
        heads = (batch, seqlen, self.nheads, self.headdim)
        y = mamba_chunk_scan_combined(
            x.reshape(heads),
            dt,
            A,
            B.reshape(batch, seqlen, self.ngroups, self.d_state),
            C.reshape(batch, seqlen, self.ngroups, self.d_state),
            self.chunk_size,
            D=D,
            z=None if self.rmsnorm else z.reshape(heads),
            dt_bias=self.dt_bias[...],
            seq_idx=seq_idx,
            dt_softplus=True,
            dt_limit=self.dt_limit,
            impl=op_impl(self.impl, mamba_chunk_scan_combined),
        )
        y = y.reshape(batch, seqlen, self.d_ssm)
        if self.rmsnorm:
            y = self.norm(y, z)
        if d_mlp > 0:
            y = jnp.concatenate([jax.nn.silu(z0) * x0, y], axis=-1)
        return self.out_proj(y)
