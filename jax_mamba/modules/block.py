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
        residual = self._add(hidden, residual)
        hidden = self.mixer(self.norm(residual.astype(jnp.float32)).astype(hidden.dtype), **mixer_kwargs)
        if self.mlp is not None:
            residual = self._add(hidden, residual)
            hidden = self.mlp(self.norm2(residual.astype(jnp.float32)).astype(hidden.dtype))
        return hidden, residual
