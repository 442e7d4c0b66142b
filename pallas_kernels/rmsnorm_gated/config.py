"""Tiling of the Pallas gated RMSNorm: how wide a column tile is, how many rows a program takes."""

import dataclasses

from pallas_kernels._triton import next_pow2


@dataclasses.dataclass(frozen=True)
class NormConfig:
    """A program reads its group in column tiles of at most ``max_block_cols`` (wider groups take several, read
    twice); the forward stacks rows until a tile holds ``tile_elements``; the backward runs
    ``bwd_programs_per_sm`` programs per SM along the rows (each summing dw and db over its rows in registers).
    Warps: one per 256 elements of a tile, 1 to ``max_warps``."""

    max_block_cols: int = 4096
    tile_elements: int = 4096
    bwd_programs_per_sm: int = 2
    max_warps: int = 8

    def validate(self) -> None:
        for name in ("max_block_cols", "tile_elements", "max_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"NormConfig.{name} must be a positive power of two, got {value!r}")
        if not isinstance(self.bwd_programs_per_sm, int) or self.bwd_programs_per_sm < 1:
            raise ValueError(f"NormConfig.bwd_programs_per_sm must be a positive int, got {self.bwd_programs_per_sm!r}")

    def warps(self, tile_elements: int) -> int:
        return min(max(tile_elements // 256, 1), self.max_warps)
