"""NVlabs' ``MambaVision`` (the ``mambavision`` package, version 1.2.0) driven from numpy: build it from our
``MambaVisionConfig``, read its weights and buffers, run loss + gradients in train or eval mode (optionally under
bf16 autocast, as NVlabs train) and one AdamW step.

The package imports mamba-ssm's ``selective_scan_fn`` into its own module; on the CPU fallback that name is
pointed at mamba-ssm's ``selective_scan_ref``, as ``backend`` does for mamba-ssm's own modules."""

import types

import numpy as np
import torch
import torch.nn.functional as F

from jax_mamba.checkpoints.convert_mamba_vision import to_nvlabs_kwargs
from jax_mamba.configs.schema import MambaVisionConfig
from torch_reference._tensors import state_to_numpy, to_numpy
from torch_reference.backend import Reference
from torch_reference.torch_model import TorchModel

MAMBAVISION_VERSION = "1.2.0"


def nvlabs_module(ref: Reference) -> types.ModuleType:
    """``mambavision.models.mamba_vision`` running on the loaded mamba-ssm (CUDA kernel, or its CPU reference)."""
    try:
        import mambavision
        import mambavision.models.mamba_vision as module
    except ImportError as err:
        raise ImportError(
            f"NVlabs' mambavision package is not importable ({err}): install it with "
            f"pip install --no-deps mambavision=={MAMBAVISION_VERSION} (make setup-torch does)"
        ) from err
    version = getattr(mambavision, "__version__", None)
    if version not in (None, MAMBAVISION_VERSION):
        raise ImportError(f"expected mambavision {MAMBAVISION_VERSION}, found {version}")
    if ref.device == "cpu":
        module.selective_scan_fn = ref.selective_scan_ref
    return module


def to_channels_first(images: np.ndarray, device: str) -> torch.Tensor:
    """(batch, H, W, C) float32 numpy -> (batch, C, H, W) torch tensor, NVlabs' layout."""
    return torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2), np.float32)).to(device)


class TorchMambaVision(TorchModel):
    def __init__(self, ref: Reference, cfg: MambaVisionConfig, seed: int = 0):
        module = nvlabs_module(ref)
        torch.manual_seed(seed)
        self.ref = ref
        self.model = module.MambaVision(**to_nvlabs_kwargs(cfg)).to(ref.device)

    def loss_and_grads(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        compute_dtype: str = "float32",
        *,
        train: bool = True,
        label_smoothing: float = 0.0,
    ):
        """(logits (batch, classes), mean cross-entropy, {param name: grad}, buffers after the forward) for images
        (batch, H, W, C) float32 and int labels (batch,). In train mode the forward normalizes by batch statistics
        and updates the running ones; the model's buffers are restored afterwards, so calls do not compound."""
        before = {k: v.clone() for k, v in self.model.named_buffers()}
        self.model.train(train)
        self.model.zero_grad(set_to_none=True)
        x = to_channels_first(images, self.ref.device)
        y = torch.from_numpy(labels.astype(np.int64)).to(self.ref.device)
        with torch.autocast(self.ref.device, dtype=torch.bfloat16, enabled=compute_dtype == "bfloat16"):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float(), y, label_smoothing=label_smoothing)
        loss.backward()
        grads = {k: to_numpy(p.grad) for k, p in self.named_parameters().items()}
        buffers = {k: state_to_numpy(v) for k, v in self.model.named_buffers()}
        with torch.no_grad():
            for k, v in self.model.named_buffers():
                v.copy_(before[k])
        return to_numpy(logits), loss.item(), grads, buffers

    def stem_relu_inputs(self, images: np.ndarray) -> list[np.ndarray]:
        """What the stem's two ReLUs (``patch_embed.conv_down.2`` and ``.5``) receive for images (batch, H, W, C)
        float32, (batch, C, H', W') each: with batch statistics (training mode) first, then with the running ones.
        The model and its buffers are left as they were."""
        conv0, bn1, _, conv3, bn4, _ = self.model.patch_embed.conv_down
        inputs = []
        with torch.no_grad():
            for train in (True, False):
                h = to_channels_first(images, self.ref.device)
                for conv, bn in ((conv0, bn1), (conv3, bn4)):
                    stats = (None, None) if train else (bn.running_mean, bn.running_var)
                    h = F.batch_norm(conv(h), *stats, bn.weight, bn.bias, training=train, eps=bn.eps)
                    inputs.append(to_numpy(h))
                    h = F.relu(h)
        return inputs
