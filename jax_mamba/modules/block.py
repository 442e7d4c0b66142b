"""Pre-norm residual block: mamba-ssm's ``modules/block.Block`` (add, norm, mixer; then add, norm2, mlp)."""

import jax
import jax.numpy as jnp
from flax import nnx


class Block(nnx.Module):
    """``residual = hidden + residual``; ``hidden = mixer(norm(residual))``; with an MLP the same again with
    ``norm2``/``mlp``. Returns (hidden, residual); the residual stream is float32 when ``residual_in_fp32``.

    Unlike mamba-ssm's fused add+norm kernel this is the unfused math (the same function)."""

    def __init__(
        self,
        mixer: nnx.Module,
        norm: nnx.Module,
        mlp: nnx.Module | None = None,
        norm2: nnx.Module | None = None,
        residual_in_fp32: bool = True,
    ):
        self.mixer, self.norm = mixer, norm
        self.mlp, self.norm2 = mlp, norm2
        self.residual_in_fp32 = residual_in_fp32

    def _add(self, hidden: jax.Array, residual: jax.Array | None) -> jax.Array:
        residual = hidden if residual is None else hidden + residual
        return residual.astype(jnp.float32) if self.residual_in_fp32 else residual

    def __call__(self, hidden: jax.Array, residual: jax.Array | None = None, **mixer_kwargs):
        return self._run(hidden, residual, lambda x: (self.mixer(x, **mixer_kwargs), None))[:2]

    def prefill(self, hidden: jax.Array, residual: jax.Array | None, max_len: int):
        """Inference over a prompt: (hidden, residual, the mixer's cache); see the mixers' ``prefill``."""
        return self._run(hidden, residual, lambda x: self.mixer.prefill(x, max_len))

    def step(self, hidden: jax.Array, residual: jax.Array, cache: dict, pos: jax.Array):
        """One decoding position, hidden and residual (batch, 1, d_model): (hidden, residual, the mixer's cache)."""
        return self._run(hidden, residual, lambda x: self.mixer.step(x, cache, pos))

    def _run(self, hidden: jax.Array, residual: jax.Array | None, mix):
        """The block around ``mix``: normed input -> (mixer output, mixer cache or None)."""
        residual = self._add(hidden, residual)
        hidden, cache = mix(self.norm(residual.astype(jnp.float32)).astype(hidden.dtype))
        if self.mlp is not None:
            residual = self._add(hidden, residual)
            hidden = self.mlp(self.norm2(residual.astype(jnp.float32)).astype(hidden.dtype))
        return hidden, residual, cache
