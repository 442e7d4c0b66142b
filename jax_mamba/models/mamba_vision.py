"""MambaVision (Hatamizadeh & Kautz, NVlabs): the whole image classifier with the module boundaries, parameter
names, initialization and forward math of NVlabs' ``mambavision/models/mamba_vision.py``, built from a
``MambaVisionConfig``. Images are channels last: (batch, H, W, in_chans), normalized floats."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jax_mamba.configs.schema import MambaVisionConfig
from jax_mamba.modules.impl import compute_dtype_for
from jax_mamba.modules.init import trunc_normal
from jax_mamba.modules.layers import LayerNorm, Linear, linear
from jax_mamba.modules.mamba_vision_mixer import MambaVisionMixer
from jax_mamba.modules.vision_layers import BatchNorm, Conv2d, DropPath
from jax_mamba.modules.vit import Attention, Mlp

MIXER = {"d_state": 8, "d_conv": 3, "expand": 1}  # NVlabs' Block builds every mixer with these


def window_partition(x: jax.Array, window: int) -> jax.Array:
    """(batch, H, W, C) with H, W multiples of ``window`` -> (batch * H/window * W/window, window * window, C);
    windows in raster order, tokens in raster order inside each window (NVlabs' order)."""
    batch, height, width, channels = x.shape
    x = x.reshape(batch, height // window, window, width // window, window, channels)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, window * window, channels)


def window_reverse(windows: jax.Array, window: int, height: int, width: int) -> jax.Array:
    """Inverse of :func:`window_partition`: -> (batch, height, width, C)."""
    channels = windows.shape[-1]
    x = windows.reshape(-1, height // window, width // window, window, window, channels)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, height, width, channels)


def transformer_block_indices(depth: int) -> list[int]:
    """The blocks of a hybrid stage that are attention: the second half, the middle one staying a mixer."""
    return list(range(depth // 2 + 1, depth)) if depth % 2 else list(range(depth // 2, depth))


class PatchEmbed(nnx.Module):
    """The stem: conv 3x3 stride 2 (no bias) -> BN -> ReLU -> conv 3x3 stride 2 (no bias) -> BN -> ReLU.

    Parameters under ``conv_down.{0,1,3,4}`` (torch's Sequential indices; the ReLUs hold none)."""

    def __init__(self, in_chans: int, in_dim: int, dim: int, *, dtype, rngs: nnx.Rngs):
        conv = lambda i, o: Conv2d(i, o, 3, stride=2, padding=1, bias=False, dtype=dtype, rngs=rngs)  # noqa: E731
        self.conv_down = nnx.List(
            [
                conv(in_chans, in_dim),
                BatchNorm(in_dim, eps=1e-4),
                jax.nn.relu,
                conv(in_dim, dim),
                BatchNorm(dim, eps=1e-4),
                jax.nn.relu,
            ]
        )

    @jax.named_scope("patch_embed")
    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.conv_down:
            x = layer(x)
        return x


class ConvBlock(nnx.Module):
    """Residual conv block: conv 3x3 -> BN -> GELU (tanh form) -> conv 3x3 -> BN -> optional per-channel gamma ->
    drop path -> add the input. Parameters: conv1/conv2 kernel and bias, norm1/norm2, gamma (layer_scale)."""

    def __init__(self, dim: int, drop_path: float, layer_scale: float | None, *, dtype, rngs: nnx.Rngs):
        self.conv1 = Conv2d(dim, dim, 3, padding=1, bias=True, dtype=dtype, rngs=rngs)
        self.norm1 = BatchNorm(dim, eps=1e-5)
        self.conv2 = Conv2d(dim, dim, 3, padding=1, bias=True, dtype=dtype, rngs=rngs)
        self.norm2 = BatchNorm(dim, eps=1e-5)
        self.gamma = nnx.Param(jnp.full((dim,), layer_scale, jnp.float32)) if layer_scale is not None else None
        self.drop_path = DropPath(drop_path)

    @jax.named_scope("conv_block")
    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        h = jax.nn.gelu(self.norm1(self.conv1(x)), approximate=True)
        h = self.norm2(self.conv2(h))
        if self.gamma is not None:
            h = h * self.gamma[...].astype(h.dtype)
        return x + self.drop_path(h, rngs)


class Downsample(nnx.Module):
    """conv 3x3 stride 2 (no bias), dim -> 2 dim. Parameters: reduction.0.kernel."""

    def __init__(self, dim: int, *, dtype, rngs: nnx.Rngs):
        self.reduction = nnx.List([Conv2d(dim, 2 * dim, 3, stride=2, padding=1, bias=False, dtype=dtype, rngs=rngs)])

    @jax.named_scope("downsample")
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.reduction[0](x)


class Block(nnx.Module):
    """Pre-norm hybrid block over window tokens: x + drop_path(gamma_1 * mixer(norm1(x))), then the same with
    norm2 / Mlp / gamma_2. The mixer is ``Attention`` for the stage's attention blocks, else ``MambaVisionMixer``.
    Parameters: norm1, mixer.*, norm2, mlp.fc1/fc2, gamma_1/gamma_2 (layer_scale)."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        attention: bool,
        *,
        mlp_ratio: float,
        qkv_bias: bool,
        qk_scale: bool | None,
        drop: float,
        attn_drop: float,
        drop_path: float,
        layer_scale: float | None,
        dtype,
        impl: str,
        scan_backend: str,
        rngs: nnx.Rngs,
    ):
        self.norm1 = LayerNorm(dim)
        if attention:
            self.mixer = Attention(
                dim, num_heads, qkv_bias, bool(qk_scale), attn_drop, drop, dtype=dtype, impl=impl, rngs=rngs
            )
        else:
            self.mixer = MambaVisionMixer(dim, **MIXER, dtype=dtype, impl=impl, scan_backend=scan_backend, rngs=rngs)
        self.attention = attention
        self.drop_path = DropPath(drop_path)
        self.norm2 = LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop=drop, dtype=dtype, rngs=rngs)
        scale = lambda: None if layer_scale is None else nnx.Param(jnp.full((dim,), layer_scale, jnp.float32))  # noqa: E731
        self.gamma_1, self.gamma_2 = scale(), scale()  # two arrays: the train step donates each buffer once

    @staticmethod
    def _scaled(h: jax.Array, gamma) -> jax.Array:
        return h if gamma is None else h * gamma[...].astype(h.dtype)

    @jax.named_scope("block")
    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        h = self.norm1(x)
        h = self.mixer(h, rngs) if self.attention else self.mixer(h)
        x = x + self.drop_path(self._scaled(h, self.gamma_1), rngs)
        h = self.mlp(self.norm2(x), rngs)
        return x + self.drop_path(self._scaled(h, self.gamma_2), rngs)


class MambaVisionLayer(nnx.Module):
    """One stage: ConvBlocks, or hybrid Blocks over non-overlapping windows (the feature map zero-padded at the
    bottom and right to whole windows, the padding cropped after the blocks, as NVlabs do: padded tokens take part
    in the mixers and attention); then the stride-2 Downsample unless it is the last stage."""

    def __init__(
        self,
        cfg: MambaVisionConfig,
        stage: int,
        drop_path: list[float],
        *,
        dtype,
        rngs: nnx.Rngs,
    ):
        dim = cfg.dim * 2**stage
        depth = cfg.depths[stage]
        self.conv = stage < 2
        self.window = cfg.window_size[stage]
        self.remat = cfg.remat
        if self.conv:
            blocks = [ConvBlock(dim, drop_path[i], cfg.layer_scale_conv, dtype=dtype, rngs=rngs) for i in range(depth)]
        else:
            attention = set(transformer_block_indices(depth))
            blocks = [
                Block(
                    dim,
                    cfg.num_heads[stage],
                    i in attention,
                    mlp_ratio=cfg.mlp_ratio,
                    qkv_bias=cfg.qkv_bias,
                    qk_scale=cfg.qk_scale,
                    drop=cfg.drop_rate,
                    attn_drop=cfg.attn_drop_rate,
                    drop_path=drop_path[i],
                    layer_scale=cfg.layer_scale,
                    dtype=dtype,
                    impl=cfg.impl,
                    scan_backend=cfg.scan_backend,
                    rngs=rngs,
                )
                for i in range(depth)
            ]
        self.blocks = nnx.List(blocks)
        self.downsample = Downsample(dim, dtype=dtype, rngs=rngs) if stage < 3 else None

    def __call__(self, x: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        """x (batch, H, W, dim) -> (batch, ceil(H/2), ceil(W/2), 2 dim), or (batch, H, W, dim) for the last."""
        _, height, width, _ = x.shape
        if not self.conv:
            w = self.window
            pad_h, pad_w = -height % w, -width % w
            with jax.named_scope("window_partition"):
                x = window_partition(jnp.pad(x, ((0, 0), (0, pad_h), (0, pad_w), (0, 0))), w)
        for block in self.blocks:
            if self.remat and not self.conv:
                x = nnx.remat(lambda b, h, r: b(h, r))(block, x, rngs)
            else:
                x = block(x, rngs)
        if not self.conv:
            with jax.named_scope("window_reverse"):
                x = window_reverse(x, self.window, height + pad_h, width + pad_w)[:, :height, :width]
        return x if self.downsample is None else self.downsample(x)


class MambaVision(nnx.Module):
    """patch_embed -> 4 stages (levels) -> BN (norm) -> global average pool -> head (Linear).

    images (batch, H, W, in_chans) float -> logits (batch, num_classes) float32. Any H, W (windows pad).
    Training mode (the default; ``.eval()`` switches) uses batch statistics in every BatchNorm and updates their
    running statistics, and applies drop path / dropout with the ``dropout`` stream of the ``rngs`` passed."""

    def __init__(self, cfg: MambaVisionConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        dtype = compute_dtype_for(cfg)
        self.patch_embed = PatchEmbed(cfg.in_chans, cfg.in_dim, cfg.dim, dtype=dtype, rngs=rngs)
        rates = np.linspace(0.0, cfg.drop_path_rate, sum(cfg.depths), dtype=np.float32).tolist()
        starts = np.cumsum([0, *cfg.depths]).tolist()
        self.levels = nnx.List(
            [MambaVisionLayer(cfg, i, rates[starts[i] : starts[i + 1]], dtype=dtype, rngs=rngs) for i in range(4)]
        )
        num_features = cfg.dim * 2**3
        self.norm = BatchNorm(num_features)
        self.head = linear(num_features, cfg.num_classes, bias=True, dtype=dtype, rngs=rngs)
        self._init_weights(rngs)

    def _init_weights(self, rngs: nnx.Rngs) -> None:
        """NVlabs' ``_init_weights`` pass over the finished model: every Linear (dt_proj included) to a
        normal(0, 0.02) truncated at +-2 and zero bias; norms already start at weight 1, bias 0."""
        init = trunc_normal(0.02)
        for _, module in nnx.iter_modules(self):
            if isinstance(module, Linear):
                module.kernel[...] = init(rngs.params(), module.kernel.shape)
                if module.bias is not None:
                    module.bias[...] = jnp.zeros_like(module.bias[...])

    def forward_features(self, images: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        """images (batch, H, W, in_chans) -> pooled features (batch, dim * 8) float32."""
        x = self.patch_embed(images.astype(self.head.dtype))
        for level in self.levels:
            x = level(x, rngs)
        return jnp.mean(self.norm(x).astype(jnp.float32), axis=(1, 2))

    def __call__(self, images: jax.Array, rngs: nnx.Rngs | None = None) -> jax.Array:
        return self.head(self.forward_features(images, rngs)).astype(jnp.float32)
