"""A mamba-ssm ``MambaLMHeadModel`` driven from numpy: build from our ``ModelConfig``, read its weights, run
loss + gradients (optionally under bf16 autocast, as mamba-ssm trains) and one AdamW step."""

import numpy as np
import torch
import torch.nn.functional as F

from jax_mamba.checkpoints.convert import to_mamba_config
from jax_mamba.configs.schema import ModelConfig
from torch_reference._tensors import to_numpy
from torch_reference.backend import Reference
from torch_reference.torch_model import TorchModel


class TorchLM(TorchModel):
    def __init__(self, ref: Reference, cfg: ModelConfig, seed: int = 0):
        options = ref.model_options(cfg.ssm_cfg.layer)
        config = to_mamba_config(cfg)
        config["fused_add_norm"] = options["fused_add_norm"]
        config["ssm_cfg"] = {**config["ssm_cfg"], **options["ssm_overrides"]}
        torch.manual_seed(seed)
        self.ref = ref
        if cfg.ssm_cfg.layer == "Mamba3":
            self.model = _with_mamba3_mixers(ref, config, cfg)
        else:
            self.model = ref.MambaLMHeadModel(ref.MambaConfig(**config), device=ref.device, dtype=torch.float32)

    def loss_and_grads(
        self, inputs: np.ndarray, targets: np.ndarray, compute_dtype: str = "float32", label_smoothing: float = 0.0
    ):
        """(logits (batch, L, vocab) float32 numpy, mean token NLL, {param name: grad}) for one batch."""
        self.model.zero_grad(set_to_none=True)
        ids = torch.from_numpy(inputs.astype(np.int64)).to(self.ref.device)
        labels = torch.from_numpy(targets.astype(np.int64)).to(self.ref.device)
        autocast = compute_dtype == "bfloat16"
        with torch.autocast(self.ref.device, dtype=torch.bfloat16, enabled=autocast):
            logits = self.model(ids).logits
        flat = logits.float().reshape(-1, logits.shape[-1])
        loss = F.cross_entropy(flat, labels.reshape(-1), label_smoothing=label_smoothing)
        loss.backward()
        grads = {k: to_numpy(p.grad) for k, p in self.named_parameters().items()}
        return to_numpy(logits), loss.item(), grads


def _with_mamba3_mixers(ref: Reference, config: dict, cfg: ModelConfig) -> torch.nn.Module:
    """mamba-ssm's ``MambaLMHeadModel`` with its own ``Mamba3`` mixers. Its ``create_block`` takes only Mamba1 and
    Mamba2 layers (mamba-ssm 2.3.2.post1 has no Mamba-3 language model), so the model is built with small Mamba2
    placeholders and each SSM layer's mixer is then replaced by a ``Mamba3``, initialized as ``MixerModel``
    initializes its mixers (``_init_weights``: out_proj rescaled by 1 / sqrt(n_layer)). Its ``Mamba3`` computes A
    with softplus only: a config with another ``A_activation`` is refused."""
    from mamba_ssm.models.mixer_seq_simple import _init_weights
    from mamba_ssm.modules.mamba3 import Mamba3

    from jax_mamba.models import ssm_layer_kwargs

    placeholder = {**config, "ssm_cfg": {"layer": "Mamba2", "d_state": 16, "headdim": 16, "expand": 1}}
    model = ref.MambaLMHeadModel(ref.MambaConfig(**placeholder), device=ref.device, dtype=torch.float32)
    kwargs = ssm_layer_kwargs(cfg.ssm_cfg)
    activation = kwargs.pop("A_activation")
    if activation != "softplus":
        raise ValueError(
            f"model.ssm_cfg.A_activation={activation!r}: mamba-ssm 2.3.2.post1's Mamba3 computes A with softplus only"
        )
    for i, block in enumerate(model.backbone.layers):
        if i not in cfg.attn_layer_idx:
            block.mixer = Mamba3(cfg.d_model, **kwargs, layer_idx=i, device=ref.device, dtype=torch.float32)
            block.mixer.apply(lambda module: _init_weights(module, n_layer=cfg.n_layer, n_residuals_per_layer=1))
    return model
