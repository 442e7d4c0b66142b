"""Our rotary embedding (``jax_mamba.modules.mha.apply_rotary``) against torch_reference's, the PyTorch one that
mamba-ssm's MHA runs here: halves and interleaved pairs, a part of the head dims, position offsets, fp32 and bf16."""

import jax.numpy as jnp
import numpy as np
import pytest

from compare.parity.tolerances import assert_close
from jax_mamba.modules.mha import apply_rotary

torch = pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
from torch_reference.rotary import RotaryEmbedding  # noqa: E402


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim,head_dim", [(16, 16), (8, 24)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rotary_matches_the_torch_reference(rng, interleaved, rotary_dim, head_dim, dtype):
    batch, seqlen, heads, kv_heads = 2, 13, 4, 2
    offset = int(rng.integers(0, 50))
    q = rng.normal(size=(batch, seqlen, heads, head_dim)).astype(np.float32)
    kv = rng.normal(size=(batch, seqlen, 2, kv_heads, head_dim)).astype(np.float32)
    t = lambda a: torch.from_numpy(a).to(getattr(torch, dtype))  # noqa: E731
    rope = RotaryEmbedding(rotary_dim, base=10000.0, interleaved=interleaved)
    q_ref, kv_ref = rope(t(q), t(kv), seqlen_offset=offset)
    j = lambda a: jnp.asarray(a, dtype)  # noqa: E731
    args = (rotary_dim, 10000.0, interleaved)
    q_ours, k_ours = apply_rotary(j(q), *args, offset=offset), apply_rotary(j(kv[:, :, 0]), *args, offset=offset)
    assert_close("q", q_ours, q_ref.float().numpy(), dtype)
    assert_close("k", k_ours, kv_ref[:, :, 0].float().numpy(), dtype)
    np.testing.assert_array_equal(kv_ref[:, :, 1].float().numpy(), np.asarray(j(kv[:, :, 1]), np.float32))
    packed = rope(t(np.stack([q, q, q], axis=2)), seqlen_offset=offset)  # the (qkv) call of MHA without GQA
    assert_close("packed q", q_ours, packed[:, :, 0].float().numpy(), dtype)
    assert torch.equal(packed[:, :, 2], t(q))  # v untouched


def test_position_offsets_per_row_and_refusals():
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 3, 1, 8)
    offsets = torch.tensor([0, 5])
    q, _ = rope(x, torch.zeros(2, 3, 2, 1, 8), seqlen_offset=offsets)
    q5, _ = rope(x[1:], torch.zeros(1, 3, 2, 1, 8), seqlen_offset=5)
    torch.testing.assert_close(q[1:], q5)
    with pytest.raises(ValueError, match="dim must be even"):
        RotaryEmbedding(7)
