"""The pieces of the mamba-ssm kernel calls that need no GPU (torch_reference.kernel_calls): a decoding loop's
inputs step by step, and Mamba-2's per-head values as stride-0 views (the calls themselves run on the GPU tests and
in compare.kernels)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")


def test_step_stacks_give_each_step_its_own_view_of_one_tensor():
    from torch_reference.kernel_calls import _step_stacks

    x = np.random.default_rng(0).normal(size=(3, 2, 4))
    stacks = _step_stacks({"x": x, "dt": x[..., :1]}, {"x": "bfloat16", "dt": "float32"}, "cpu")
    assert len(stacks) == 3 and all(set(s) == {"x", "dt"} for s in stacks)
    assert stacks[2]["x"].dtype == torch.bfloat16 and stacks[2]["x"].shape == (2, 4)
    assert stacks[1]["x"].untyped_storage().data_ptr() == stacks[0]["x"].untyped_storage().data_ptr()
    np.testing.assert_allclose(stacks[2]["dt"].numpy(), x[2, :, :1], rtol=1e-6)
    assert _step_stacks(None, {}, "cpu") == [{}] and _step_stacks({}, {}, "cpu") == [{}]


def test_per_head_values_expand_over_the_head_dims_without_copies():
    from torch_reference.kernel_calls import _per_head

    heads, headdim, dstate = 3, 8, 16
    args = {
        "dt": torch.rand(2, heads, 1),
        "A": torch.rand(heads, 1, 1),
        "D": torch.rand(heads, 1),
        "dt_bias": torch.rand(heads, 1),
        "x": torch.rand(2, heads, headdim),
    }
    views = _per_head(args, headdim, dstate)
    assert views["dt"].shape == (2, heads, headdim) and views["dt"].stride(-1) == 0
    assert views["A"].shape == (heads, headdim, dstate) and views["A"].stride(-1) == views["A"].stride(-2) == 0
    assert views["D"].shape == views["dt_bias"].shape == (heads, headdim)
    assert views["x"] is args["x"]
    assert torch.equal(views["dt"][:, :, 5], args["dt"][..., 0])
