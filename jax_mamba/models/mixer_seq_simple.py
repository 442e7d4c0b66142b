"""mamba-ssm's ``models/mixer_seq_simple``: ``MixerModel`` (embedding, blocks, final norm) and
``MambaLMHeadModel`` (tied LM head, vocab padded to a multiple), built from a ``ModelConfig``."""

import dataclasses
import inspect
import math

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.configs.schema import ModelConfig, SSMConfig
from jax_mamba.modules.block import Block
from jax_mamba.modules.impl import compute_dtype_for
from jax_mamba.modules.layers import LayerNorm, RMSNorm, embedding, linear
from jax_mamba.modules.mamba2 import Mamba2
from jax_mamba.modules.mamba3 import Mamba3
from jax_mamba.modules.mamba_simple import Mamba
from jax_mamba.modules.mha import MHA
from jax_mamba.modules.mlp import GatedMLP


def ssm_layer_kwargs(ssm_cfg: SSMConfig) -> dict:
    """The ``ssm_cfg`` fields the configured mixer takes, by argument name (as mamba-ssm passes ``**ssm_cfg``), with
    d_state resolved to the layer's default when unset."""
    fields = {**dataclasses.asdict(ssm_cfg), "d_state": ssm_cfg.resolved_d_state()}
    cls = {"Mamba1": Mamba, "Mamba2": Mamba2, "Mamba3": Mamba3}[ssm_cfg.layer]
    accepted = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in fields.items() if k in accepted}


def _mixer(cfg: ModelConfig, layer_idx: int, dtype, rngs: nnx.Rngs) -> nnx.Module:
    if layer_idx in cfg.attn_layer_idx:
        return MHA(cfg.d_model, **dataclasses.asdict(cfg.attn_cfg), dtype=dtype, impl=cfg.impl, rngs=rngs)
    run = dict(mixer_remat=cfg.mixer_remat, dtype=dtype, impl=cfg.impl, rngs=rngs)
    if cfg.ssm_cfg.layer == "Mamba3":
        return Mamba3(cfg.d_model, **ssm_layer_kwargs(cfg.ssm_cfg), **run)
    if cfg.ssm_cfg.layer == "Mamba1":
        scan = dict(scan_checkpoint_every=cfg.scan_checkpoint_every, scan_backend=cfg.scan_backend)
        return Mamba(cfg.d_model, **ssm_layer_kwargs(cfg.ssm_cfg), **scan, **run)
    return Mamba2(cfg.d_model, **ssm_layer_kwargs(cfg.ssm_cfg), ssd_checkpoint_every=cfg.ssd_checkpoint_every, **run)


class MixerModel(nnx.Module):
    """embedding -> n_layer Blocks -> final add + norm_f. input_ids (batch, L) int -> (batch, L, d_model)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        dtype = compute_dtype_for(cfg)
        norm_cls = RMSNorm if cfg.rms_norm else LayerNorm
        self.cfg = cfg
        self.embedding = embedding(
            cfg.padded_vocab_size(), cfg.d_model, std=cfg.initializer_range, dtype=dtype, rngs=rngs
        )
        layers = []
        for i in range(cfg.n_layer):
            mlp = norm2 = None
            if cfg.d_intermediate > 0:
                mlp = GatedMLP(cfg.d_model, cfg.d_intermediate, dtype=dtype, rngs=rngs)
                norm2 = norm_cls(cfg.d_model, cfg.norm_epsilon, impl=cfg.impl)
            layers.append(
                Block(
                    _mixer(cfg, i, dtype, rngs),
                    norm_cls(cfg.d_model, cfg.norm_epsilon, impl=cfg.impl),
                    mlp,
                    norm2,
                    residual_in_fp32=cfg.residual_in_fp32,
                )
            )
        self.layers = nnx.List(layers)
        self.norm_f = norm_cls(cfg.d_model, cfg.norm_epsilon, impl=cfg.impl)
        self._rescale_residual_projections()

    def _rescale_residual_projections(self) -> None:
        """mamba-ssm's ``_init_weights(rescale_prenorm_residual=True)``: out_proj and fc2 kernels / sqrt(n_layer).

        (mamba-ssm applies its init twice, MixerModel then MambaLMHeadModel; the second pass, with one residual per
        layer, is the one that lands, so the divisor is sqrt(n_layer) with or without MLPs.)"""
        scale = 1.0 / math.sqrt(self.cfg.n_layer)
        for block in self.layers:
            projections = [block.mixer.out_proj] + ([block.mlp.fc2] if block.mlp is not None else [])
            for proj in projections:
                proj.kernel[...] = proj.kernel[...] * scale

    def __call__(self, input_ids: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        if seq_idx is not None and self.cfg.ssm_cfg.layer == "Mamba3":
            raise ValueError(
                "seq_idx (packed sequences) is supported by Mamba1, Mamba2 and attention layers, not Mamba3"
            )
        mixer_kwargs = {} if seq_idx is None else {"seq_idx": seq_idx}
        hidden = self.embedding(input_ids)
        residual = None
        for block in self.layers:
            if self.cfg.remat:
                hidden, residual = nnx.remat(lambda b, h, r: b(h, r, **mixer_kwargs))(block, hidden, residual)
            else:
                hidden, residual = block(hidden, residual, **mixer_kwargs)
        return self._final_norm(hidden, residual)

    def _final_norm(self, hidden: jax.Array, residual: jax.Array | None) -> jax.Array:
        residual = hidden if residual is None else hidden + residual
        return self.norm_f(residual.astype(jnp.float32)).astype(hidden.dtype)

    def prefill(self, input_ids: jax.Array, max_len: int) -> tuple[jax.Array, list[dict]]:
        """Inference over prompts input_ids (batch, L) -> (the last position's hidden state (batch, d_model), one
        cache per layer). ``max_len``: the positions the attention layers' caches hold (prompt + generated)."""
        hidden, residual, caches = self.embedding(input_ids), None, []
        for block in self.layers:
            hidden, residual, cache = block.prefill(hidden, residual, max_len)
            caches.append(cache)
        return self._final_norm(hidden[:, -1], residual[:, -1]), caches

    def step(self, token_ids: jax.Array, caches: list[dict], pos: jax.Array) -> tuple[jax.Array, list[dict]]:
        """One decoding position: token_ids (batch,) int at position ``pos`` (int scalar) and the caches after the
        previous position -> (hidden state (batch, d_model), the caches after this position)."""
        hidden, residual, new_caches = self.embedding(token_ids[:, None]), None, []
        for block, cache in zip(self.layers, caches, strict=True):
            hidden, residual, cache = block.step(hidden, residual, cache, pos)
            new_caches.append(cache)
        return self._final_norm(hidden[:, 0], residual[:, 0]), new_caches


class MambaLMHeadModel(nnx.Module):
    """backbone (MixerModel) + LM head tied to the embedding (or its own lm_head.kernel when not tied).

    input_ids (batch, L) int32 -> logits (batch, L, padded vocab) in the compute dtype."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.backbone = MixerModel(cfg, rngs=rngs)
        if not cfg.tie_embeddings:
            self.lm_head = linear(
                cfg.d_model, cfg.padded_vocab_size(), bias=False, dtype=compute_dtype_for(cfg), rngs=rngs
            )

    def __call__(self, input_ids: jax.Array, seq_idx: jax.Array | None = None) -> jax.Array:
        weight = self.head_weight()
        return self.backbone(input_ids, seq_idx).astype(weight.dtype) @ weight

    def prefill(self, input_ids: jax.Array, max_len: int) -> tuple[jax.Array, list[dict]]:
        """Inference over prompts input_ids (batch, L) int -> (the next position's logits (batch, padded vocab),
        one cache per layer); attention layers' caches hold ``max_len`` positions (prompt + generated)."""
        hidden, caches = self.backbone.prefill(input_ids, max_len)
        weight = self.head_weight()
        return hidden.astype(weight.dtype) @ weight, caches

    def step(self, token_ids: jax.Array, caches: list[dict], pos: jax.Array) -> tuple[jax.Array, list[dict]]:
        """One decoding position: token_ids (batch,) int at position ``pos`` -> (the next position's logits
        (batch, padded vocab), the updated caches)."""
        hidden, caches = self.backbone.step(token_ids, caches, pos)
        weight = self.head_weight()
        return hidden.astype(weight.dtype) @ weight, caches

    def attention_implementation(self) -> str | None:
        """What the attention layers run over whole sequences ("cudnn" flash attention or "xla"), None without
        attention layers: for run records and messages."""
        attention = [b.mixer for b in self.backbone.layers if isinstance(b.mixer, MHA)]
        return attention[0].implementation(compute_dtype_for(self.cfg)) if attention else None

    def head_weight(self) -> jax.Array:
        """The LM head as a (d_model, padded vocab) matrix in the compute dtype: logits = hidden @ it. For callers
        that apply the head to slices of the positions (the chunked loss)."""
        if self.cfg.tie_embeddings:
            embedding = self.backbone.embedding
            return embedding.embedding[...].astype(embedding.dtype or jnp.float32).T
        return self.lm_head.kernel[...].astype(self.lm_head.dtype)
