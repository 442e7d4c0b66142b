"""Tiling of the Pallas causal conv1d: steps and channels per program."""

import dataclasses

from pallas_kernels._triton import next_pow2


@dataclasses.dataclass(frozen=True)
class ConvConfig:
    """Defaults: tiles that compile without spilling for an H100 at width 4 (``compare.triton_ir``: forward 72
    registers, backward 167; the backward keeps 2 x width - 1 shifted input tiles live), the backward's the faster
    of the two measured on an H100 (docs/kernels.md#causal-conv1d)."""

    block_l: int = 32  # forward: time steps per program
    block_d: int = 64  # forward: channels per program (contiguous in memory)
    num_warps: int = 4
    bwd_block_l: int = 32
    bwd_block_d: int = 64
    bwd_num_warps: int = 4

    def validate(self) -> None:
        for name in ("block_l", "block_d", "num_warps", "bwd_block_l", "bwd_block_d", "bwd_num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"ConvConfig.{name} must be a positive power of two, got {value!r}")
