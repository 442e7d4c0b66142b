"""Tiling of the Pallas selective scan: which channels a program owns and how time is walked.

A program owns one batch row and ``block_d`` channels of one group, for all N states, and walks time sequentially
in chunks of ``chunk`` unrolled steps. Each step's loads are issued ``prefetch`` steps ahead of its arithmetic,
so their latency hides behind the steps before it. The forward saves the state at every chunk start; the
backward recomputes inside a chunk in sub-chunks of ``bwd_unroll`` steps instead of reading a materialized
(L, dim, N) state.
"""

import dataclasses

from pallas_kernels._triton import next_pow2

MAX_DSTATE = 256


@dataclasses.dataclass(frozen=True)
class ScanConfig:
    block_d: int = 16  # forward: channels per program
    num_warps: int = 1
    chunk: int = 8  # unrolled steps per loop iteration, and between saved states
    prefetch: int = 4  # forward: steps between a load and its use
    bwd_unroll: int = 2  # backward: steps recomputed and reversed together (divides chunk)
    bwd_block_d: int = 8
    bwd_num_warps: int = 1
    bwd_prefetch: int = 1

    def validate(self) -> None:
        for name in ("prefetch", "bwd_prefetch"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ScanConfig.{name} must be a positive int, got {value!r}")
        for name in ("block_d", "num_warps", "chunk", "bwd_unroll", "bwd_block_d", "bwd_num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"ScanConfig.{name} must be a positive power of two, got {value!r}")
        if self.bwd_unroll > self.chunk:
            raise ValueError(f"ScanConfig.bwd_unroll={self.bwd_unroll} must divide chunk={self.chunk}")


FILL_PROGRAMS = 512  # about 4 one-warp programs per SM of an H100/H200: below this, halve the channel block


def default_config(dstate: int, dim_per_group: int, programs_per_channel: int = 1) -> ScanConfig:
    """Tiling measured best on an H200 (benchmarks/kernels/selective_scan-notes.md) for N = 16, scaled for N.

    Forward: 16 channels per one-warp program (8 states per thread, 2 lanes per channel); backward: 8, as it holds
    more tiles in registers. ``programs_per_channel`` is batch x groups / dim-per-group's share: with too few
    programs to fill the GPU (small batch), the forward halves its channel block.
    """
    np_ = next_pow2(dstate)
    block = min(max(1, 256 // np_), next_pow2(dim_per_group))
    if programs_per_channel * -(-dim_per_group // block) < FILL_PROGRAMS:
        block = max(1, block // 2)
    return ScanConfig(block_d=block, bwd_block_d=max(1, min(block, 128 // np_)))
