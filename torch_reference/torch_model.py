"""What the comparison harness asks of any PyTorch reference model, whatever its family: its state dict as numpy,
its parameters by name, and one ``torch.optim.AdamW`` step on the gradients of its last backward pass."""

import numpy as np
import torch

from torch_reference._tensors import state_to_numpy
from torch_reference.backend import Reference


class TorchModel:
    """Holds ``self.model`` (a torch module in float32 on ``ref.device``); families add their loss and grads."""

    ref: Reference
    model: torch.nn.Module

    def state_dict(self) -> dict[str, np.ndarray]:
        """Parameters and buffers (e.g. BatchNorm running statistics) as numpy; integer buffers stay integers."""
        return {k: state_to_numpy(v) for k, v in self.model.state_dict().items()}

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        return dict(self.model.named_parameters())  # a tied lm_head.weight is listed once, as the embedding

    def adamw_step(
        self, *, lr: float, betas: tuple[float, float], eps: float, weight_decay: float, decayed: set[str]
    ) -> dict[str, np.ndarray]:
        """One torch.optim.AdamW step on the gradients of the last backward pass; weight decay only on the
        parameter names in ``decayed``. Returns the new state dict."""
        params = self.named_parameters()
        groups = [
            {"params": [p for k, p in params.items() if k in decayed], "weight_decay": weight_decay},
            {"params": [p for k, p in params.items() if k not in decayed], "weight_decay": 0.0},
        ]
        torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps).step()
        return self.state_dict()
