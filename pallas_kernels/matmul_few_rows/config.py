"""Tiling of the few-rows matmul: output columns per program, the reduction chunk, the split of K over programs."""

import dataclasses

from pallas_kernels._triton import next_pow2

MIN_ROWS = 16  # tensor-core dots need 16 rows: fewer are padded (masked loads, no memory read)


@dataclasses.dataclass(frozen=True)
class MatmulFewRowsConfig:
    block_n: int = 64  # output columns per program (128 contiguous bytes of a bf16 row of w)
    block_k: int = 128  # rows of w per loop step
    programs_per_sm: int = 4  # K is split over programs until (N / block_n) x splits reaches this many per SM
    num_warps: int = 4
    num_stages: int = 4  # loads in flight per program (software pipelining of the K loop)

    def validate(self) -> None:
        for name in ("block_n", "block_k", "num_warps", "programs_per_sm"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"MatmulFewRowsConfig.{name} must be a positive power of two, got {value!r}")
        if self.block_n < 16 or self.block_k < 16:
            raise ValueError(
                f"MatmulFewRowsConfig.block_n and block_k must be >= 16, got {self.block_n}, {self.block_k}"
            )
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"MatmulFewRowsConfig.num_stages must be a positive int, got {self.num_stages!r}")
