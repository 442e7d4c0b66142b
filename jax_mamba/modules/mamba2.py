"""Mamba-2 mixer: mamba-ssm's ``modules/mamba2.Mamba2`` (names, shapes, initialization, non-fused forward math)."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from jax_mamba.modules.context_parallel import ssd_across_context
from jax_mamba.modules.impl import op_impl
from jax_mamba.modules.init import dt_bias_init, uniform
from jax_mamba.modules.layers import CausalConv1d, RMSNormGated, linear
from jax_mamba.modules.per_device import context_size, per_device
from pallas_kernels import mamba_chunk_scan_combined, selective_state_update
from pallas_kernels.ssd.api import SAVED_STATES_NAME

SSD_OUTPUT_NAME = "mamba2_ssd_output"  # the SSD's output (batch, L, d_ssm), kept for the backward by the remat policy


class Mamba2(nnx.Module):
    """in_proj -> [z0, x0, z, xBC, dt]; xBC -> causal conv + SiLU -> [x, B, C] (in training, in_proj's blocks are
    separate matmuls and x is convolved apart from BC: ``__call__``); SSD scan (dt_bias, softplus,
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
        mixer_remat: bool = True,
        ssd_checkpoint_every: int | None = None,
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
        self.impl, self.mixer_remat = impl, mixer_remat
        self.ssd_checkpoint_every = ssd_checkpoint_every  # the Pallas SSD's kept states (None: its default)
        d_in_proj = 2 * self.d_inner + 2 * ngroups * d_state + self.nheads
        self.in_proj = linear(d_model, d_in_proj, bias=bias, dtype=dtype, rngs=rngs, impl=impl)
        conv_dim = self.d_ssm + 2 * ngroups * d_state
        self.conv1d = CausalConv1d(conv_dim, d_conv, bias=conv_bias, rngs=rngs, impl=impl, weight_bound=conv_init)
        self.dt_bias = nnx.Param(dt_bias_init(dt_min, dt_max, dt_init_floor)(rngs.params(), (self.nheads,)))
        self.A_log = nnx.Param(jnp.log(uniform(*A_init_range)(rngs.params(), (self.nheads,))))
        self.D = nnx.Param(jnp.ones((self.d_ssm if D_has_hdim else self.nheads,), jnp.float32))
        if rmsnorm:
            self.norm = RMSNormGated(
                self.d_ssm, eps=1e-5, group_size=self.d_ssm // ngroups, norm_before_gate=norm_before_gate, impl=impl
            )
        self.out_proj = linear(self.d_inner, d_model, bias=bias, dtype=dtype, rngs=rngs, impl=impl)

    def __call__(self, hidden_states: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        """hidden_states (batch, L, d_model) -> (batch, L, d_model); seq_idx int (batch, L) for packed sequences.

        in_proj's blocks z0, x0, z, x, BC, dt come from separate matmuls (``Linear.split``) and x is convolved
        apart from B and C, so that neither the forward copies slices into the kernels' buffers nor the backward
        concatenates the gradients of the parts."""
        parts = self.in_proj.split(hidden_states, self._in_proj_blocks())
        if self.mixer_remat and op_impl(self.impl, mamba_chunk_scan_combined) == "pallas":
            # As mamba-ssm's fused Mamba-2 layer: of the (batch, L, channels) activations the backward keeps only
            # in_proj's output and the SSD's output (plus the Pallas SSD's own named states) and recomputes the conv,
            # the gated norm and out_proj's input. The reference SSD names no states: it would be rerun whole, so it
            # runs as is.
            keep = jax.checkpoint_policies.save_only_these_names(SAVED_STATES_NAME, SSD_OUTPUT_NAME)
            return jax.checkpoint(self._after_in_proj, policy=keep)(*parts, seq_idx)
        return self._after_in_proj(*parts, seq_idx)

    def _after_in_proj(self, z0, x0, z, x, BC, dt, seq_idx: jax.Array | None) -> jax.Array:
        """in_proj's blocks (batch, L, each block's channels) -> the layer's output: conv, SSD, gated norm,
        out_proj."""
        conv_dim = self.d_ssm + BC.shape[-1]
        x = self.conv1d(x, activation="silu", seq_idx=seq_idx, channels=(0, self.d_ssm))
        BC = self.conv1d(BC, activation="silu", seq_idx=seq_idx, channels=(self.d_ssm, conv_dim))
        B, C = self._split_bc(BC)
        y = checkpoint_name(self._scan(self._heads(x), B, C, dt, z, seq_idx=seq_idx), SSD_OUTPUT_NAME)
        return self._output(y, z0, x0, z)

    def _in_proj_blocks(self) -> list[int]:
        """Channels of in_proj's output blocks z0, x0, z, x, BC, dt: d_mlp, d_mlp, d_ssm, d_ssm, 2 G N, H."""
        d_mlp = self.d_inner - self.d_ssm
        return [d_mlp, d_mlp, self.d_ssm, self.d_ssm, 2 * self.ngroups * self.d_state, self.nheads]

    def _split_in_proj(self, zxbcdt: jax.Array) -> list[jax.Array]:
        """(..., d_in_proj) -> z0, x0 (..., d_mlp), z (..., d_ssm), xBC (..., d_ssm + 2 G N), dt (..., H): x and BC
        joined, as inference convolves them with one state."""
        ends = list(itertools.accumulate(self._in_proj_blocks()))
        return jnp.split(zxbcdt, [ends[0], ends[1], ends[2], ends[4]], axis=-1)

    def _split_xbc(self, xBC: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The conv's output (..., d_ssm + 2 G N) -> x (..., H, P), B and C (..., G, N)."""
        x, BC = jnp.split(xBC, [self.d_ssm], axis=-1)
        return (self._heads(x), *self._split_bc(BC))

    def _split_bc(self, BC: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(..., 2 G N) -> B and C (..., G, N)."""
        groups = (*BC.shape[:-1], self.ngroups, self.d_state)
        B, C = jnp.split(BC, 2, axis=-1)
        return B.reshape(groups), C.reshape(groups)

    def _heads(self, x: jax.Array) -> jax.Array:
        """(..., d_ssm) -> (..., H, P)."""
        return x.reshape(*x.shape[:-1], self.nheads, self.headdim)

    def _scan(self, x, B, C, dt: jax.Array, z: jax.Array, *, seq_idx=None, return_final_states: bool = False):
        """The SSD over the conv's outputs x (batch, L, H, P), B and C (batch, L, G, N) -> y (batch, L, d_ssm)
        [, final states]; without rmsnorm the scan gates with silu(z)."""
        batch, seqlen = x.shape[:2]
        impl = op_impl(self.impl, mamba_chunk_scan_combined)
        A = -jnp.exp(self.A_log[...].astype(jnp.float32))
        D = self._D_by_head() if self.D_has_hdim else self.D[...]
        gate = None if self.rmsnorm else z.reshape(x.shape)
        scan = functools.partial(
            mamba_chunk_scan_combined,
            chunk_size=self.chunk_size,
            dt_softplus=True,
            dt_limit=self.dt_limit,
            impl=impl,
            checkpoint_every=self.ssd_checkpoint_every,
        )
        if context_size() > 1:  # the sequence split over devices (training; checked by the config)
            if seq_idx is not None or return_final_states:
                raise ValueError("context parallelism takes neither packed sequences (seq_idx) nor final states")

            def scan_from(x, dt, A, B, C, D, z, dt_bias, initial_states):  # on one device's stretch
                return scan(x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states)

            y = ssd_across_context(scan_from, x, dt, A, B, C, D, gate, self.dt_bias[...], self.dt_limit)
            return y.reshape(batch, seqlen, self.d_ssm)
        result = per_device(
            lambda x, dt, A, B, C, D, z, bias, s: scan(
                x, dt, A, B, C, D=D, z=z, dt_bias=bias, seq_idx=s, return_final_states=return_final_states
            ),
            impl,
            (True, True, False, True, True, False, True, False, True),
            (True, True) if return_final_states else True,
            x, dt, A, B, C, D, gate, self.dt_bias[...], seq_idx,
        )  # fmt: skip
        y, final = result if return_final_states else (result, None)
        y = y.reshape(batch, seqlen, self.d_ssm)
        return (y, final) if return_final_states else y

    def _D_by_head(self) -> jax.Array:
        """D as (H, P) when it has one value per head dim, else (H, 1): one per head (a size-1 axis the kernels
        broadcast)."""
        return self.D[...].reshape(self.nheads, -1)

    def _output(self, y: jax.Array, z0: jax.Array, x0: jax.Array, z: jax.Array) -> jax.Array:
        """y (batch, L, d_ssm) -> the gated norm (the scan gated y when there is none), the MLP part in front,
        out_proj."""
        if self.rmsnorm:
            y = self.norm(y, z)
        if self.d_inner > self.d_ssm:
            y = jnp.concatenate([jax.nn.silu(z0) * x0, y], axis=-1)
        return self.out_proj(y)

    def prefill(self, hidden_states: jax.Array, max_len: int) -> tuple[jax.Array, dict]:
        """Inference over a prompt: hidden_states (batch, L, d_model) -> (output like __call__'s, cache) with cache
        {"conv": (batch, d_conv - 1, d_ssm + 2 G N) the last conv inputs, "ssm": (batch, H, P, N) float32,
        "A": (H, 1, 1) float32, -exp(A_log) computed once here, so that a decoding loop carries it instead of
        recomputing it every token}. ``max_len`` (the attention layers' cache length) is unused."""
        z0, x0, z, xBC, dt = self._split_in_proj(self.in_proj(hidden_states))
        xBC, conv_state = self.conv1d.with_state(xBC, activation="silu")
        y, ssm_state = self._scan(*self._split_xbc(xBC), dt, z, return_final_states=True)
        A = -jnp.exp(self.A_log[...].astype(jnp.float32))[:, None, None]
        return self._output(y, z0, x0, z), {"conv": conv_state, "ssm": ssm_state, "A": A}

    def step(self, hidden_states: jax.Array, cache: dict, pos: jax.Array) -> tuple[jax.Array, dict]:
        """One decoding position: hidden_states (batch, 1, d_model) and the cache after the previous position ->
        (output (batch, 1, d_model), the cache after this one). ``pos`` is unused (the state carries position)."""
        z0, x0, z, xBC, dt = self._split_in_proj(self.in_proj(hidden_states))
        xBC, conv_state = self.conv1d.with_state(xBC, cache["conv"], activation="silu")
        x, B, C = self._split_xbc(xBC[:, 0])
        dt = jax.nn.softplus(dt[:, 0].astype(jnp.float32) + self.dt_bias[...])
        if self.dt_limit != (0.0, math.inf):
            dt = jnp.clip(dt, *self.dt_limit)  # as the chunked scan: after softplus (mamba-ssm's step skips it)
        # per-head values as size-1 axes (batch, H, 1), (H, 1, 1), (H, 1): the kernel reads each once per head
        D = self._D_by_head()
        gate = None if self.rmsnorm else z[:, 0].reshape(x.shape)
        impl = op_impl(self.impl, selective_state_update)
        y, ssm_state = per_device(
            functools.partial(selective_state_update, impl=impl),
            impl,
            (True, True, True, False, True, True, False, True),
            (True, True),
            cache["ssm"], x, dt[..., None], cache["A"], B, C, D, gate,
        )  # fmt: skip
        y = y.reshape(x.shape[0], 1, self.d_ssm)
        return self._output(y, z0, x0, z), {**cache, "conv": conv_state, "ssm": ssm_state}
