"""Mamba-3 mixer (SISO and MIMO): mamba-ssm's ``modules/mamba3.Mamba3`` (names, shapes, initialization, forward
math)."""

import functools
import itertools

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.configs.schema import MAMBA3_A_ACTIVATIONS
from jax_mamba.modules.impl import op_impl
from jax_mamba.modules.init import dt_bias_init
from jax_mamba.modules.layers import RMSNormGated, linear
from pallas_kernels import mamba3_mimo, mamba3_mimo_step, mamba3_siso_combined, mamba3_siso_step
from pallas_kernels.mamba3.api import SAVED_NAMES

STATE_NAMES = ("angle", "ssm", "k", "v")  # the decoding cache, in the order the SISO ops take and return states


def heavy_tail(x: jax.Array) -> jax.Array:
    """1 + x for x >= 0, 1 / (1 - x) below: positive, continuous with slope 1 at 0, and with A = -heavy_tail(dd_A)
    only polynomially small for very negative dd_A where softplus is exponentially small (mamba-ssm's main uses it
    for stability at high learning rates)."""
    return jnp.where(x >= 0, 1.0 + x, 1.0 / (1.0 - jnp.minimum(x, 0.0)))


A_ACTIVATIONS = dict(zip(MAMBA3_A_ACTIVATIONS, (jax.nn.softplus, heavy_tail), strict=True))


class Mamba3(nnx.Module):
    """in_proj -> [z, x, B, C, dd_dt, dd_A, trap, angles]; A = min(-f(dd_A), -A_floor) with f the
    ``A_activation`` (``A_ACTIVATIONS``: softplus as mamba-ssm 2.3.2.post1, heavy_tail as its main and mamba3-jax)
    and dt = softplus(dd_dt + dt_bias) per token and head (no conv, no A_log); B and C RMS-normed over d_state; the
    SISO core (``pallas_kernels.mamba3``, on its Mosaic GPU kernels where ``impl`` asks for kernels and the compute
    dtype is 16-bit: biases B_bias / C_bias, rotary angles, trapezoid, D, silu(z) gating); with ``is_outproj_norm``
    a gated RMSNorm with z (groups of headdim) instead of the gate; out_proj.

    Parameters: in_proj.kernel (d_model, 2 d_inner + 2 R G N + 3 H + S), dt_bias (H,), B_bias and C_bias (H, R, N),
    B_norm.weight and C_norm.weight (N,), D (H,), norm.weight (d_inner,) with is_outproj_norm, out_proj.kernel
    (d_inner, d_model); with ``is_mimo`` also mimo_x, mimo_z and mimo_o (H, R, P), the ranks' input, gate and
    output projections. H = d_inner / headdim heads, G = ngroups, N = d_state, R = mimo_rank (1 without is_mimo),
    S = the rotary angles: half of d_state x rope_fraction, rounded down to whole pairs. MIMO takes B and C per rank
    (rank outermost in in_proj's output) and turns the feature pairs (j, j + N / 2); with is_outproj_norm each
    rank's output is normed and gated with z mimo_z_r before mimo_o sums the ranks.
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
        A_activation: str = "softplus",
        is_outproj_norm: bool = False,
        is_mimo: bool = False,
        mimo_rank: int = 4,
        chunk_size: int = 64,
        *,
        dtype=jnp.float32,
        impl: str = "auto",
        mixer_remat: bool = True,
        rngs: nnx.Rngs,
    ):
        if is_mimo and (not isinstance(mimo_rank, int) or mimo_rank < 1):
            raise ValueError(f"Mamba3: mimo_rank must be a positive int, got {mimo_rank!r}")
        if rope_fraction not in (0.5, 1.0):
            raise ValueError(f"Mamba3: rope_fraction must be 0.5 or 1.0, got {rope_fraction}")
        if A_activation not in A_ACTIVATIONS:
            raise ValueError(f"Mamba3: A_activation must be one of {MAMBA3_A_ACTIVATIONS}, got {A_activation!r}")
        self.A_activation = A_activation
        self.d_model, self.d_state, self.headdim, self.ngroups = d_model, d_state, headdim, ngroups
        self.d_inner = expand * d_model
        if self.d_inner % headdim:
            raise ValueError(f"Mamba3: expand x d_model = {self.d_inner} must be a multiple of headdim={headdim}")
        self.nheads = self.d_inner // headdim
        rotated = int(d_state * rope_fraction)
        self.num_rope_angles = (rotated - rotated % 2) // 2
        if self.num_rope_angles < 1:
            raise ValueError(f"Mamba3: d_state x rope_fraction must hold a rotary pair, got d_state={d_state}")
        self.rotary_dim_divisor = d_state // self.num_rope_angles  # MIMO's angles: N / divisor pairs
        self.A_floor, self.is_outproj_norm, self.chunk_size = A_floor, is_outproj_norm, chunk_size
        self.impl, self.mixer_remat = impl, mixer_remat
        self.is_mimo, self.rank = is_mimo, mimo_rank if is_mimo else 1
        self.in_proj = linear(d_model, sum(self._in_proj_blocks()), bias=False, dtype=dtype, rngs=rngs, impl=impl)
        self.dt_bias = nnx.Param(dt_bias_init(dt_min, dt_max, dt_init_floor)(rngs.params(), (self.nheads,)))
        self.B_bias = nnx.Param(jnp.ones((self.nheads, self.rank, d_state), jnp.float32))
        self.C_bias = nnx.Param(jnp.ones((self.nheads, self.rank, d_state), jnp.float32))
        if is_mimo:
            shape = (self.nheads, self.rank, headdim)
            self.mimo_x = nnx.Param(jnp.full(shape, 1.0 / self.rank, jnp.float32))
            self.mimo_z = nnx.Param(jnp.ones(shape, jnp.float32))
            self.mimo_o = nnx.Param(jnp.full(shape, 1.0 / self.rank, jnp.float32))
        self.B_norm = RMSNormGated(d_state, eps=1e-5, impl=impl)
        self.C_norm = RMSNormGated(d_state, eps=1e-5, impl=impl)
        self.D = nnx.Param(jnp.ones((self.nheads,), jnp.float32))
        if is_outproj_norm:
            self.norm = RMSNormGated(self.d_inner, eps=1e-5, group_size=headdim, norm_before_gate=True, impl=impl)
        self.out_proj = linear(self.d_inner, d_model, bias=False, dtype=dtype, rngs=rngs, impl=impl)

    def _in_proj_blocks(self) -> list[int]:
        """Channels of in_proj's output blocks z, x, B, C, dd_dt, dd_A, trap, angles (mamba-ssm's order)."""
        bc = self.rank * self.ngroups * self.d_state
        return [self.d_inner, self.d_inner, bc, bc, self.nheads, self.nheads, self.nheads, self.num_rope_angles]

    def _inputs(self, hidden_states: jax.Array) -> tuple[dict, jax.Array]:
        """hidden_states (batch, L, d_model) -> (the SISO core's arguments in its layouts, z (batch, L, H, P))."""
        batch, seqlen, _ = hidden_states.shape
        ends = list(itertools.accumulate(self._in_proj_blocks()))[:-1]
        z, x, B, C, dd_dt, dd_A, trap, angles = jnp.split(self.in_proj(hidden_states), ends, axis=-1)
        heads = (batch, seqlen, self.nheads, self.headdim)
        groups = (batch, seqlen, *((self.rank,) if self.is_mimo else ()), self.ngroups, self.d_state)
        f32 = jnp.float32
        A = jnp.minimum(-A_ACTIVATIONS[self.A_activation](dd_A.astype(f32)), -self.A_floor)  # (batch, L, H)
        dt = jax.nn.softplus(dd_dt.astype(f32) + self.dt_bias[...])
        by_head = lambda a: jnp.swapaxes(a, 1, 2)  # noqa: E731  (batch, L, H) -> (batch, H, L)
        z = z.reshape(heads)
        biases = (
            (self.C_bias[...], self.B_bias[...]) if self.is_mimo else (self.C_bias[...][:, 0], self.B_bias[...][:, 0])
        )
        inputs = {
            "Q": self.C_norm(C.reshape(groups)),
            "K": self.B_norm(B.reshape(groups)),
            "V": x.reshape(heads),
            "ADT": by_head(A * dt),
            "DT": by_head(dt),
            "Trap": by_head(trap),
            "Q_bias": biases[0],
            "K_bias": biases[1],
            "Angles": jnp.broadcast_to(angles.astype(f32)[:, :, None, :], (*heads[:3], self.num_rope_angles)),
            "D": self.D[...],
            "Z": None if self.is_outproj_norm else z,
        }
        if self.is_mimo:
            outputs = None if self.is_outproj_norm else self.mimo_o[...]
            inputs |= {"MIMO_V": self.mimo_x[...], "MIMO_Z": self.mimo_z[...], "MIMO_Out": outputs}
        return inputs, z

    def _output(self, y: jax.Array, z: jax.Array) -> jax.Array:
        """The core's output (batch, L, H, P), or per rank (batch, L, R, H, P) for MIMO with is_outproj_norm -> the
        gated output norm where configured (per rank, with z mimo_z_r, the ranks then summed by mimo_o), out_proj."""
        batch, seqlen = y.shape[:2]
        flat = (batch, seqlen, self.d_inner)
        if self.is_outproj_norm and self.is_mimo:
            gates = z[:, :, None] * jnp.swapaxes(self.mimo_z[...], 0, 1)  # (batch, L, R, H, P)
            normed = [self.norm(y[:, :, r].reshape(flat), gates[:, :, r].reshape(flat)) for r in range(self.rank)]
            weights = jnp.swapaxes(self.mimo_o[...], 0, 1).reshape(self.rank, self.d_inner)
            return self.out_proj(sum(w * n for w, n in zip(weights, normed, strict=True)).astype(normed[0].dtype))
        y = y.reshape(flat)
        if self.is_outproj_norm:
            y = self.norm(y, z.reshape(flat))
        return self.out_proj(y)

    def _sequence(self, inputs: dict, return_states: bool):
        """The SISO or MIMO op over the whole sequence."""
        impl = op_impl(self.impl, mamba3_siso_combined)
        if self.is_mimo:
            divisor = self.rotary_dim_divisor
            return mamba3_mimo(
                **inputs, chunk_size=self.chunk_size, rotary_dim_divisor=divisor, return_state=return_states, impl=impl
            )
        return mamba3_siso_combined(**inputs, chunk_size=self.chunk_size, return_final_states=return_states, impl=impl)

    def __call__(self, hidden_states: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        """hidden_states (batch, L, d_model) -> (batch, L, d_model). Packed sequences (seq_idx) are not supported."""
        if seq_idx is not None:
            raise ValueError("Mamba3: seq_idx (packed sequences) is not supported yet")
        inputs, z = self._inputs(hidden_states)
        sequence = functools.partial(self._sequence, return_states=False)
        if self.mixer_remat and op_impl(self.impl, mamba3_siso_combined) == "pallas" and jax.default_backend() == "gpu":
            # As the Mamba-1 and Mamba-2 mixers: the backward keeps the kernels' block states and output and
            # recomputes the rotated q and k, the scales and the correction from in_proj's output (the per-head
            # float32 q and k would otherwise be kept, 2 N values a head and position). On a GPU only: off one the
            # kernels run in Pallas's Mosaic GPU interpreter, whose callbacks' effects jax.checkpoint's
            # differentiation refuses.
            sequence = jax.checkpoint(sequence, policy=jax.checkpoint_policies.save_only_these_names(*SAVED_NAMES))
        return self._output(sequence(inputs), z)

    def prefill(self, hidden_states: jax.Array, max_len: int) -> tuple[jax.Array, dict]:
        """Inference over a prompt: (output like __call__'s, cache {"angle" (batch, H, S), "ssm" (batch, H, P, N),
        "k" (batch, H, N), MIMO (batch, R, H, N), all float32, "v" (batch, H, P)}: what the next step reads).
        ``max_len`` is unused."""
        inputs, z = self._inputs(hidden_states)
        y, *states = self._sequence(inputs, return_states=True)
        return self._output(y, z), dict(zip(STATE_NAMES, states, strict=True))

    def step(self, hidden_states: jax.Array, cache: dict, pos: jax.Array) -> tuple[jax.Array, dict]:
        """One decoding position: hidden_states (batch, 1, d_model) and the cache after the previous position ->
        (output (batch, 1, d_model), the cache after this one). ``pos`` is unused (the state carries position)."""
        inputs, z = self._inputs(hidden_states)
        one = {k: None if v is None else v[:, 0] for k, v in inputs.items() if k in ("Q", "K", "V", "Angles", "Z")}
        one |= {k: inputs[k][..., 0] for k in ("ADT", "DT", "Trap")}
        one |= {k: v for k, v in inputs.items() if k in ("Q_bias", "K_bias", "D", "MIMO_V", "MIMO_Z", "MIMO_Out")}
        states = tuple(cache[k] for k in STATE_NAMES)
        if self.is_mimo:
            impl = op_impl(self.impl, mamba3_mimo_step)
            y, new = mamba3_mimo_step(**one, Input_States=states, rotary_dim_divisor=self.rotary_dim_divisor, impl=impl)
        else:
            y, new = mamba3_siso_step(**one, Input_States=states, impl=op_impl(self.impl, mamba3_siso_step))
        new = tuple(n.astype(s.dtype) for n, s in zip(new, states, strict=True))  # a bfloat16 decode state stays so
        return self._output(y[:, None], z), dict(zip(STATE_NAMES, new, strict=True))
