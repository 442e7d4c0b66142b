"""Mamba-1 mixer: mamba-ssm's ``modules/mamba_simple.Mamba`` (names, shapes, initialization, slow-path math)."""

import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.impl import op_impl
from jax_mamba.modules.init import dt_bias_init, uniform
from jax_mamba.modules.layers import CausalConv1d, linear
from jax_mamba.modules.per_device import per_device
from jax_mamba.modules.weight_grads import tie_weight_grad
from pallas_kernels import selective_scan_fn, selective_state_update
from pallas_kernels.selective_scan.api import SAVED_STATES_NAME


class Mamba(nnx.Module):
    """in_proj -> x, z (two matmuls: ``Linear.split``); x -> causal conv + SiLU -> x_proj -> [dt (dt_rank), B, C];
    dt -> dt_proj (its bias enters the scan as delta_bias, softplus inside); selective scan with D and silu(z)
    gating; out_proj.

    Parameters: in_proj.kernel (d_model, 2 d_inner), conv1d.weight (d_inner, d_conv), conv1d.bias,
    x_proj.kernel (d_inner, dt_rank + 2 d_state), dt_proj.kernel (dt_rank, d_inner), dt_proj.bias (d_inner,),
    A_log (d_inner, d_state), D (d_inner,), out_proj.kernel (d_inner, d_model).
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        dt_rank: int | str = "auto",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init: str = "random",
        dt_scale: float = 1.0,
        dt_init_floor: float = 1e-4,
        conv_bias: bool = True,
        bias: bool = False,
        *,
        dtype=jnp.float32,
        impl: str = "auto",
        mixer_remat: bool = True,
        scan_checkpoint_every: int | None = None,
        scan_backend: str = "triton",
        rngs: nnx.Rngs,
    ):
        self.d_model, self.d_state, self.d_conv, self.expand = d_model, d_state, d_conv, expand
        self.d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16) if dt_rank == "auto" else dt_rank
        self.impl, self.mixer_remat = impl, mixer_remat
        self.scan_checkpoint_every = scan_checkpoint_every  # the Pallas scan's kept states (None: its default)
        self.scan_backend = scan_backend  # the Pallas scan's kernels (selective_scan_fn's backend)
        self.in_proj = linear(d_model, 2 * self.d_inner, bias=bias, dtype=dtype, rngs=rngs, impl=impl)
        self.conv1d = CausalConv1d(self.d_inner, d_conv, bias=conv_bias, rngs=rngs, impl=impl)
        self.x_proj = linear(self.d_inner, self.dt_rank + 2 * d_state, bias=False, dtype=dtype, rngs=rngs, impl=impl)
        self.dt_proj = linear(self.dt_rank, self.d_inner, bias=True, dtype=dtype, rngs=rngs, impl=impl)
        std = self.dt_rank**-0.5 * dt_scale
        if dt_init == "constant":
            self.dt_proj.kernel[...] = jnp.full((self.dt_rank, self.d_inner), std, jnp.float32)
        else:
            self.dt_proj.kernel[...] = uniform(-std, std)(rngs.params(), (self.dt_rank, self.d_inner))
        self.dt_proj.bias[...] = dt_bias_init(dt_min, dt_max, dt_init_floor)(rngs.params(), (self.d_inner,))
        A = jnp.broadcast_to(jnp.arange(1, d_state + 1, dtype=jnp.float32), (self.d_inner, d_state))
        self.A_log = nnx.Param(jnp.log(A))
        self.D = nnx.Param(jnp.ones((self.d_inner,), jnp.float32))
        self.out_proj = linear(self.d_inner, d_model, bias=bias, dtype=dtype, rngs=rngs, impl=impl)

    def __call__(self, hidden_states: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        """hidden_states (batch, L, d_model) -> (batch, L, d_model) in the compute dtype; seq_idx int (batch, L) for
        packed sequences (the conv and the scan restart at each; the Pallas scan runs them on its Mosaic GPU kernels,
        ``scan_backend`` "mosaic_gpu" or "auto")."""
        x, z = self.in_proj.split(hidden_states, [self.d_inner, self.d_inner])
        if self.mixer_remat and op_impl(self.impl, selective_scan_fn) == "pallas":
            # As mamba-ssm's mamba_inner_fn (checkpoint_lvl 1): the backward recomputes the conv, x_proj and dt_proj
            # from x and keeps only the scan kernel's own (named) states, not the conv's output or delta (batch, L,
            # d_inner) each. The reference scan names no states: it would be recomputed whole, so it runs as is.
            keep_states = jax.checkpoint_policies.save_only_these_names(SAVED_STATES_NAME)
            return self.out_proj(jax.checkpoint(self.ssm, policy=keep_states)(x, z, seq_idx))
        return self.out_proj(self.ssm(x, z, seq_idx))

    def ssm(self, x: jax.Array, z: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        """x, z (batch, L, d_inner) -> the gated scan output (batch, L, d_inner): conv, projections, scan."""
        return self._scan(self.conv1d(x, activation="silu", seq_idx=seq_idx), z, seq_idx=seq_idx)

    def _projections(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """The conv's output x (..., d_inner) -> dt (..., d_inner) before its bias, B and C (..., N), A (d_inner, N)."""
        x_dbl = self.x_proj(x)
        dt, B, C = jnp.split(x_dbl, [self.dt_rank, self.dt_rank + self.d_state], axis=-1)
        dt = jnp.dot(*tie_weight_grad(dt, self.dt_proj.kernel[...].astype(dt.dtype)))  # bias: the scan's delta_bias
        return dt, B, C, -jnp.exp(self.A_log[...].astype(jnp.float32))

    def _scan(self, x: jax.Array, z: jax.Array, *, return_last_state: bool = False, seq_idx=None):
        dt, B, C, A = self._projections(x)
        impl = op_impl(self.impl, selective_scan_fn)
        scan = functools.partial(
            selective_scan_fn,
            delta_softplus=True,
            return_last_state=return_last_state,
            impl=impl,
            checkpoint_every=self.scan_checkpoint_every,
            backend=self.scan_backend,
        )
        return per_device(
            lambda u, dt, A, B, C, D, z, bias, seq: scan(u, dt, A, B, C, D, z, delta_bias=bias, seq_idx=seq),
            impl,
            (True, True, False, True, True, False, True, False, True),
            (True, True) if return_last_state else True,
            x, dt, A, B[:, :, None, :], C[:, :, None, :], self.D[...], z, self.dt_proj.bias[...], seq_idx,
        )  # fmt: skip

    def prefill(self, hidden_states: jax.Array, max_len: int) -> tuple[jax.Array, dict]:
        """Inference over a prompt: hidden_states (batch, L, d_model) -> (output like __call__'s, cache) with cache
        {"conv": (batch, d_conv - 1, d_inner) the last conv inputs, "ssm": (batch, d_inner, N) float32,
        "A": (d_inner, N) float32, -exp(A_log) computed once here, so that a decoding loop carries it instead of
        recomputing it every token}. ``max_len`` (the attention layers' cache length) is unused."""
        x, z = self.in_proj.split(hidden_states, [self.d_inner, self.d_inner])
        x, conv_state = self.conv1d.with_state(x, activation="silu")
        y, ssm_state = self._scan(x, z, return_last_state=True)
        A = -jnp.exp(self.A_log[...].astype(jnp.float32))
        return self.out_proj(y), {"conv": conv_state, "ssm": ssm_state, "A": A}

    def step(self, hidden_states: jax.Array, cache: dict, pos: jax.Array) -> tuple[jax.Array, dict]:
        """One decoding position: hidden_states (batch, 1, d_model) and the cache after the previous position ->
        (output (batch, 1, d_model), the cache after this one). ``pos`` is unused (the state carries position)."""
        x, z = self.in_proj.split(hidden_states, [self.d_inner, self.d_inner])
        x, conv_state = self.conv1d.with_state(x, cache["conv"], activation="silu")
        dt, B, C, _ = self._projections(x[:, 0])
        impl = op_impl(self.impl, selective_state_update)
        y, ssm_state = per_device(
            functools.partial(selective_state_update, dt_softplus=True, impl=impl),
            impl,
            (True, True, True, False, True, True, False, True, False),
            (True, True),
            cache["ssm"], x[:, 0], dt, cache["A"], B, C, self.D[...], z[:, 0], self.dt_proj.bias[...],
        )  # fmt: skip
        return self.out_proj(y[:, None]), {**cache, "conv": conv_state, "ssm": ssm_state}
