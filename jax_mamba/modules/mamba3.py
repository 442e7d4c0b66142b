"""Mamba-3 mixer (SISO): mamba-ssm's ``modules/mamba3.Mamba3`` (names, shapes, initialization, forward math)."""

import itertools

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.init import dt_bias_init
from jax_mamba.modules.layers import RMSNormGated, linear
from pallas_kernels import mamba3_siso_combined, mamba3_siso_step

STATE_NAMES = ("angle", "ssm", "k", "v")  # the decoding cache, in the order the SISO ops take and return states


class Mamba3(nnx.Module):
    """in_proj -> [z, x, B, C, dd_dt, dd_A, trap, angles]; A = min(-softplus(dd_A), -A_floor) and dt =
    softplus(dd_dt + dt_bias) per token and head (no conv, no A_log); B and C RMS-normed over d_state; the SISO core
    (``pallas_kernels.mamba3``: biases B_bias / C_bias, rotary angles, trapezoid, D, silu(z) gating); with
    ``is_outproj_norm`` a gated RMSNorm with z (groups of headdim) instead of the gate; out_proj.

    Parameters: in_proj.kernel (d_model, 2 d_inner + 2 G N + 3 H + S), dt_bias (H,), B_bias and C_bias (H, 1, N),
    B_norm.weight and C_norm.weight (N,), D (H,), norm.weight (d_inner,) with is_outproj_norm, out_proj.kernel
    (d_inner, d_model). H = d_inner / headdim heads, G = ngroups, N = d_state, S = the rotary angles: half of
    d_state x rope_fraction, rounded down to whole pairs. MIMO (``is_mimo``) is not implemented.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 128,
        expand: int = 2,
        headdim: int = 64,
        ngroups: int = 1,
        rope_fraction: float = 0.5,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        A_floor: float = 1e-4,
        is_outproj_norm: bool = False,
        is_mimo: bool = False,
        chunk_size: int = 64,
        *,
        dtype=jnp.float32,
        impl: str = "auto",
        rngs: nnx.Rngs,
    ):
        if is_mimo:
            raise NotImplementedError("Mamba3: is_mimo (the MIMO variant) is not implemented; use is_mimo=False")
        if rope_fraction not in (0.5, 1.0):
            raise ValueError(f"Mamba3: rope_fraction must be 0.5 or 1.0, got {rope_fraction}")
        self.d_model, self.d_state, self.headdim, self.ngroups = d_model, d_state, headdim, ngroups
        self.d_inner = expand * d_model
        if self.d_inner % headdim:
            raise ValueError(f"Mamba3: expand x d_model = {self.d_inner} must be a multiple of headdim={headdim}")
        self.nheads = self.d_inner // headdim
        rotated = int(d_state * rope_fraction)
        self.num_rope_angles = (rotated - rotated % 2) // 2
        if self.num_rope_angles < 1:
            raise ValueError(f"Mamba3: d_state x rope_fraction must hold a rotary pair, got d_state={d_state}")
        self.A_floor, self.is_outproj_norm, self.chunk_size = A_floor, is_outproj_norm, chunk_size
        self.in_proj = linear(d_model, sum(self._in_proj_blocks()), bias=False, dtype=dtype, rngs=rngs, impl=impl)
        self.dt_bias = nnx.Param(dt_bias_init(dt_min, dt_max, dt_init_floor)(rngs.params(), (self.nheads,)))
        self.B_bias = nnx.Param(jnp.ones((self.nheads, 1, d_state), jnp.float32))
        self.C_bias = nnx.Param(jnp.ones((self.nheads, 1, d_state), jnp.float32))
        self.B_norm = RMSNormGated(d_state, eps=1e-5, impl=impl)
        self.C_norm = RMSNormGated(d_state, eps=1e-5, impl=impl)
        self.D = nnx.Param(jnp.ones((self.nheads,), jnp.float32))
        if is_outproj_norm:
            self.norm = RMSNormGated(self.d_inner, eps=1e-5, group_size=headdim, norm_before_gate=True, impl=impl)
        self.out_proj = linear(self.d_inner, d_model, bias=False, dtype=dtype, rngs=rngs, impl=impl)

    def _in_proj_blocks(self) -> list[int]:
        """Channels of in_proj's output blocks z, x, B, C, dd_dt, dd_A, trap, angles (mamba-ssm's order)."""
        bc = self.ngroups * self.d_state
        return [self.d_inner, self.d_inner, bc, bc, self.nheads, self.nheads, self.nheads, self.num_rope_angles]

    def _inputs(self, hidden_states: jax.Array) -> tuple[dict, jax.Array]:
        """hidden_states (batch, L, d_model) -> (the SISO core's arguments in its layouts, z (batch, L, H, P))."""
        batch, seqlen, _ = hidden_states.shape
        ends = list(itertools.accumulate(self._in_proj_blocks()))[:-1]
        z, x, B, C, dd_dt, dd_A, trap, angles = jnp.split(self.in_proj(hidden_states), ends, axis=-1)
        heads = (batch, seqlen, self.nheads, self.headdim)
        groups = (batch, seqlen, self.ngroups, self.d_state)
        f32 = jnp.float32
        A = jnp.minimum(-jax.nn.softplus(dd_A.astype(f32)), -self.A_floor)  # (batch, L, H)
        dt = jax.nn.softplus(dd_dt.astype(f32) + self.dt_bias[...])
        by_head = lambda a: jnp.swapaxes(a, 1, 2)  # noqa: E731  (batch, L, H) -> (batch, H, L)
        z = z.reshape(heads)
        inputs = {
            "Q": self.C_norm(C.reshape(groups)),
            "K": self.B_norm(B.reshape(groups)),
            "V": x.reshape(heads),
            "ADT": by_head(A * dt),
            "DT": by_head(dt),
            "Trap": by_head(trap),
            "Q_bias": self.C_bias[...][:, 0],
            "K_bias": self.B_bias[...][:, 0],
            "Angles": jnp.broadcast_to(angles.astype(f32)[:, :, None, :], (*heads[:3], self.num_rope_angles)),
            "D": self.D[...],
            "Z": None if self.is_outproj_norm else z,
        }
        return inputs, z

    def _output(self, y: jax.Array, z: jax.Array) -> jax.Array:
        """The core's output (batch, L, H, P) -> the gated output norm where configured, out_proj."""
        batch, seqlen = y.shape[:2]
        y = y.reshape(batch, seqlen, self.d_inner)
        if self.is_outproj_norm:
            y = self.norm(y, z.reshape(batch, seqlen, self.d_inner))
        return self.out_proj(y)

    def __call__(self, hidden_states: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        """hidden_states (batch, L, d_model) -> (batch, L, d_model). Packed sequences (seq_idx) are not supported."""
        if seq_idx is not None:
            raise ValueError("Mamba3: seq_idx (packed sequences) is not supported yet")
        inputs, z = self._inputs(hidden_states)
        return self._output(mamba3_siso_combined(**inputs, chunk_size=self.chunk_size), z)

    def prefill(self, hidden_states: jax.Array, max_len: int) -> tuple[jax.Array, dict]:
        """Inference over a prompt: (output like __call__'s, cache {"angle" (batch, H, S), "ssm" (batch, H, P, N),
        "k" (batch, H, N), all float32, "v" (batch, H, P)}: what the next step reads). ``max_len`` is unused."""
        inputs, z = self._inputs(hidden_states)
        y, *states = mamba3_siso_combined(**inputs, chunk_size=self.chunk_size, return_final_states=True)
        return self._output(y, z), dict(zip(STATE_NAMES, states, strict=True))

    def step(self, hidden_states: jax.Array, cache: dict, pos: jax.Array) -> tuple[jax.Array, dict]:
        """One decoding position: hidden_states (batch, 1, d_model) and the cache after the previous position ->
        (output (batch, 1, d_model), the cache after this one). ``pos`` is unused (the state carries position)."""
        inputs, z = self._inputs(hidden_states)
        one = {k: None if v is None else v[:, 0] for k, v in inputs.items() if k in ("Q", "K", "V", "Angles", "Z")}
        one |= {k: inputs[k][..., 0] for k in ("ADT", "DT", "Trap")}
        one |= {k: inputs[k] for k in ("Q_bias", "K_bias", "D")}
        states = tuple(cache[k] for k in STATE_NAMES)
        y, states = mamba3_siso_step(**one, Input_States=states)
        return self._output(y[:, None], z), dict(zip(STATE_NAMES, states, strict=True))
