"""numpy <-> torch for the comparison harness (which works in numpy, so torch stays inside torch_reference)."""

import numpy as np
import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def to_torch(value: np.ndarray, dtype: str, device: str, grad: bool = False) -> torch.Tensor:
    tensor = torch.from_numpy(np.array(value, dtype=np.float32)).to(device=device, dtype=DTYPES[dtype])
    return tensor.requires_grad_(grad)


def to_numpy(tensor: torch.Tensor | None) -> np.ndarray | None:
    """A float32 copy (never a view of the tensor's memory, which later in-place updates would change)."""
    return None if tensor is None else np.array(tensor.detach().float().cpu().numpy())


def state_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A copy of a state-dict entry: float32 for floating tensors, integer counters keep their integer dtype."""
    return to_numpy(tensor) if tensor.is_floating_point() else np.array(tensor.detach().cpu().numpy())


def vjp(outputs: tuple[torch.Tensor, ...], cotangents: tuple[np.ndarray, ...], leaves: dict[str, torch.Tensor]):
    """Backpropagate ``cotangents`` (numpy, one per output) and return {name: grad as float32 numpy}."""
    grads = [to_torch(c, "float32", o.device).to(o.dtype) for o, c in zip(outputs, cotangents, strict=True)]
    torch.autograd.backward(outputs, grads)
    return {name: to_numpy(t.grad) for name, t in leaves.items()}
