"""Tiling of the Pallas selective state update: which kernel runs it, and the Triton kernel's head dims and warps per
program."""

import dataclasses

from pallas_kernels._triton import next_pow2

BACKENDS = ("triton", "mosaic_gpu")


@dataclasses.dataclass(frozen=True)
class StateUpdateConfig:
    block_p: int = 16  # Triton: head dims per program
    num_warps: int = 4  # Triton
    backend: str = "triton"  # "mosaic_gpu": the step kernel shared with Mamba-3 (P in 64s, N in 8s, Hopper)

    def validate(self) -> None:
        for name in ("block_p", "num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"StateUpdateConfig.{name} must be a positive power of two, got {value!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"StateUpdateConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
