"""What the comparison harness asks of any PyTorch reference model, whatever its family: its state dict as numpy,
its parameters by name, one ``torch.optim.AdamW`` step on the gradients of its last backward pass, and the spread of
its bias gradients (the scale of their rounding)."""

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import torch

from torch_reference._tensors import state_to_numpy
from torch_reference.backend import Reference

# Layers whose bias gradient is a sum over rows (tokens, pixels, nodes) of the layer's output gradient.
BIASED_LAYERS = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


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

    @contextlib.contextmanager
    def bias_gradient_spreads(self) -> Iterator[dict[str, float]]:
        """Within the block, every backward pass through a layer of ``BIASED_LAYERS`` records the spread of its bias
        gradient: the root-sum-square of the terms whose sum the gradient is (the layer's output gradient, every
        row and channel; a layer called several times adds every call's terms). Their rounding adds up like a random
        walk to about the spread times the unit roundoff, however far the terms cancel (a bias right before a batch
        norm: zero in exact arithmetic). Yields {parameter name: spread}, filled when the block ends; biases whose
        layer no backward pass reached are absent."""
        names = {id(p): k for k, p in self.named_parameters().items()}
        squares: dict[str, float] = {}

        def watch(module: torch.nn.Module, inputs, output: torch.Tensor) -> None:
            name = names.get(id(module.bias))
            if name is not None and output.requires_grad:
                output.register_hook(lambda g: squares.update({name: squares.get(name, 0.0) + _square_sum(g)}))

        handles = [
            m.register_forward_hook(watch)
            for m in self.model.modules()
            if isinstance(m, BIASED_LAYERS) and m.bias is not None
        ]
        spreads: dict[str, float] = {}
        try:
            yield spreads
        finally:
            for handle in handles:
                handle.remove()
            spreads.update({name: math.sqrt(total) for name, total in squares.items()})


def _square_sum(grad: torch.Tensor) -> float:
    return float(grad.detach().double().square().sum())
