"""Rotary position embeddings for mamba-ssm's ``MHA`` where flash-attn (which provides them) is not installed.

``RotaryEmbedding`` has the interface ``MHA`` calls (flash-attn's ``layers.rotary.RotaryEmbedding``: built with
(dim, base, interleaved, device); called as ``(qkv)`` with qkv (batch, L, 3, heads, head_dim), or ``(q, kv)`` with
q (batch, L, heads, head_dim) and kv (batch, L, 2, kv heads, head_dim), plus ``seqlen_offset`` (an int or a
(batch,) tensor) and ``max_seqlen``). The math is written from RoPE's definition (Su et al., 2021): position t turns
the feature pair i of the first ``dim`` features by the angle t * base^(-2i / dim); pairs are the two halves of those
features (GPT-NeoX style) or, with ``interleaved``, neighbours (2i, 2i + 1). As flash-attn does, cos and sin are
computed in float32 and rounded to the inputs' dtype, and the rotation runs in float32.
"""

import torch


class RotaryEmbedding(torch.nn.Module):
    def __init__(self, dim: int, base: float = 10000.0, interleaved: bool = False, scale_base=None, device=None, **_):
        super().__init__()
        if scale_base is not None:
            raise NotImplementedError("RotaryEmbedding: scale_base (XPos) is not supported")
        if dim % 2:
            raise ValueError(f"RotaryEmbedding: dim must be even, got {dim}")
        self.dim, self.base, self.interleaved = dim, float(base), interleaved

    def _cos_sin(self, seqlen: int, offset, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (batch or 1, L, 1, dim / 2) in ``dtype`` for positions offset .. offset + L - 1."""
        inv_freq = 1.0 / self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float32, device=device) / self.dim)
        positions = torch.arange(seqlen, dtype=torch.float32, device=device)[None]
        if torch.is_tensor(offset):
            positions = positions + offset.to(device=device, dtype=torch.float32)[:, None]
        else:
            positions = positions + float(offset)
        angles = positions[..., None] * inv_freq  # (batch or 1, L, dim / 2)
        return angles.cos().to(dtype)[:, :, None], angles.sin().to(dtype)[:, :, None]

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (batch, L, heads, head_dim): the first ``dim`` features rotated, the rest unchanged."""
        rot, rest = x[..., : self.dim].float(), x[..., self.dim :]
        cos, sin = cos.float(), sin.float()
        if self.interleaved:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            turned = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
        else:
            x1, x2 = rot.chunk(2, dim=-1)
            turned = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return torch.cat([turned.to(x.dtype), rest], dim=-1)

    def forward(self, qkv: torch.Tensor, kv: torch.Tensor | None = None, seqlen_offset=0, max_seqlen=None):
        cos, sin = self._cos_sin(qkv.shape[1], seqlen_offset, qkv.device, qkv.dtype)
        if kv is None:
            q, k, v = qkv.unbind(dim=2)
            return torch.stack([self._rotate(q, cos, sin), self._rotate(k, cos, sin), v], dim=2)
        k, v = kv.unbind(dim=2)
        return self._rotate(qkv, cos, sin), torch.stack([self._rotate(k, cos, sin), v], dim=2)


def install_if_missing() -> bool:
    """Give mamba-ssm's MHA this RotaryEmbedding when flash-attn's is absent; True when flash-attn's is in use."""
    import mamba_ssm.modules.mha as mha

    if mha.RotaryEmbedding is not None and mha.RotaryEmbedding is not RotaryEmbedding:
        return True
    mha.RotaryEmbedding = RotaryEmbedding
    return False
