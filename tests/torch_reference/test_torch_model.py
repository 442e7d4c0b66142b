"""TorchModel.bias_gradient_spreads: the root-sum-square of the terms each bias gradient sums, against the same
terms taken by hand (a bias before a batch norm, whose gradient cancels to rounding, and a layer called twice)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")

from torch_reference.torch_model import TorchModel  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4, 6)
        self.norm = torch.nn.BatchNorm1d(6)
        self.conv = torch.nn.Conv1d(6, 3, kernel_size=2)
        self.unused = torch.nn.Linear(3, 3)

    def forward(self, x):
        h = self.norm(self.first(x))  # first.bias: zero gradient in exact arithmetic (training-mode batch norm)
        y = self.conv(h.T[None])  # (1, 3, rows - 1)
        return self.conv(y.new_ones(1, 6, 5)).sum() + (y**2).sum()  # conv called twice


def test_spreads_are_the_root_sum_square_of_each_bias_terms(rng):
    torch.manual_seed(int(rng.integers(1 << 30)))
    side = TorchModel()
    side.model = _Net().train()
    x = torch.tensor(rng.normal(size=(9, 4)), dtype=torch.float32)
    terms = {}
    h_first = side.model.first(x)
    h_first.retain_grad()
    h = side.model.norm(h_first)
    y = side.model.conv(h.T[None])
    y.retain_grad()
    y_ones = side.model.conv(y.new_ones(1, 6, 5))
    y_ones.retain_grad()
    (y_ones.sum() + (y**2).sum()).backward()
    terms["first.bias"] = h_first.grad
    terms["conv.bias"] = torch.cat([y.grad.flatten(), y_ones.grad.flatten()])
    expected = {name: float(np.sqrt(np.sum(np.square(t.double().numpy())))) for name, t in terms.items()}

    side.model.zero_grad(set_to_none=True)
    with side.bias_gradient_spreads() as spreads:
        side.model(x).backward()
        assert spreads == {}  # filled when the block ends
    assert spreads.keys() == {"first.bias", "conv.bias"}  # unused's layer never ran
    for name, value in expected.items():
        assert spreads[name] == pytest.approx(value, rel=1e-12)
    first_grad = float(side.model.first.bias.grad.abs().max())
    assert first_grad < 1e-5 * spreads["first.bias"]  # the case the spread is for: a sum cancelled to rounding

    side.model.zero_grad(set_to_none=True)
    side.model(x).backward()  # outside the block: nothing recorded any more
    assert spreads.keys() == {"first.bias", "conv.bias"}
    assert all(not m._forward_hooks for m in side.model.modules())
