"""Tiling of the Pallas selective state update: head dims and warps per program."""

import dataclasses

from pallas_kernels._triton import next_pow2


@dataclasses.dataclass(frozen=True)
class StateUpdateConfig:
    block_p: int = 16  # head dims per program
    num_warps: int = 4

    def validate(self) -> None:
        for name in ("block_p", "num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"StateUpdateConfig.{name} must be a positive power of two, got {value!r}")
