"""Tiling of the Pallas SSD kernels: how long a block of time a program takes per step, how many head dims it owns.

Time is cut into blocks of ``block_l`` positions. Sequential passes (one program per batch row, head and
``state_block_p`` head dims) walk the blocks carrying the (head dims, N) float32 state, or its gradient in the
backward, and store it per block; everything else runs block-parallel as the quadratic (attention-like) SSD form
on tensor cores: the forward output with one program per block, head and ``block_p`` head dims (each recomputes
C·Bᵀ), or, for L <= ``fused_forward_max_l``, one fused sequential forward per batch row, head and ``block_p`` head
dims that needs no stored states; the backward's per-head gradients with one program per block and head; dB and dC
with ``bwd_head_splits`` programs per block and group, each looping over its share of the group's heads so that
they sum in registers. ``block_l`` is the kernels' own chunk: it changes rounding only, never the result
(mamba-ssm's ``chunk_size`` is accepted and checked but does not tile these kernels).
"""

import dataclasses

from pallas_kernels._triton import next_pow2

MAX_HEADDIM = 128
MAX_DSTATE = 256
MIN_DOT = 16  # Triton's smallest dot dimension


@dataclasses.dataclass(frozen=True)
class SsdConfig:
    block_l: int = 64  # positions per block (the granularity of the stored states)
    block_p: int = 64  # forward output pass: head dims per program (clipped to headdim)
    num_warps: int = 4
    num_stages: int = 2  # Triton software-pipelining depth (it prefetches the sequential passes' loads)
    fused_forward_max_l: int = 8192  # forward as one sequential pass (no stored states) when L <= this; 0: never
    persistent_programs: int = 0  # split forward's output pass: 0 one program per tile; n > 0 n programs looping
    state_block_p: int = 16  # sequential state passes (forward states, backward state gradients)
    state_num_warps: int = 4
    bwd_num_warps: int = 8  # backward per-head kernel (dx, dz, ddt, dA, dD, d dt_bias); 4 spill (ptxas)
    bwd_head_splits: int = 4  # backward dB/dC kernel: programs sharing a group's heads (at most; rounded to a divisor)
    dbc_num_warps: int = 8
    bwd_num_stages: int = 2

    def validate(self) -> None:
        for name in ("block_l", "block_p", "state_block_p"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < MIN_DOT or value != next_pow2(value):
                raise ValueError(f"SsdConfig.{name} must be a power of two >= {MIN_DOT}, got {value!r}")
        for name in ("num_warps", "state_num_warps", "bwd_num_warps", "dbc_num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"SsdConfig.{name} must be a positive power of two, got {value!r}")
        for name in ("num_stages", "bwd_num_stages", "bwd_head_splits"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SsdConfig.{name} must be a positive int, got {value!r}")
        for name in ("fused_forward_max_l", "persistent_programs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"SsdConfig.{name} must be an int >= 0, got {value!r}")
