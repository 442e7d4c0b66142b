"""Gated MLP: mamba-ssm's ``modules/mlp.GatedMLP`` (fc1 -> [y, gate], y * silu(gate), fc2)."""

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.layers import linear


class GatedMLP(nnx.Module):
    """hidden = hidden_features (default 8/3 in_features) rounded up to a multiple of ``multiple_of``.

    Parameters: fc1.kernel (in, 2 hidden), fc2.kernel (hidden, out)."""

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        out_features: int | None = None,
        bias: bool = False,
        multiple_of: int = 128,
        *,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ):
        out_features = in_features if out_features is None else out_features
        hidden = hidden_features if hidden_features is not None else int(8 * in_features / 3)
        hidden = -(-hidden // multiple_of) * multiple_of
        self.fc1 = linear(in_features, 2 * hidden, bias=bias, dtype=dtype, rngs=rngs)
        self.fc2 = linear(hidden, out_features, bias=bias, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        y, gate = jnp.split(self.fc1(x), 2, axis=-1)
        return self.fc2(y * jax.nn.silu(gate))
