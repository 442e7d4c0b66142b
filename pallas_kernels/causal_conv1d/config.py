"""Tiling of the Pallas causal conv1d: which backend, steps and channels per program."""

import dataclasses

from pallas_kernels._triton import next_pow2

BACKENDS = ("auto", "triton", "mosaic_gpu")


@dataclasses.dataclass(frozen=True)
class ConvConfig:
    """Defaults: ``backend="auto"``, the Mosaic GPU kernels where they cover the call and Triton's elsewhere
    (``causal_conv1d.dispatch.choose_backends``); Mosaic GPU programs of ``mosaic_segment_blocks`` blocks of
    ``mosaic_block_l`` = 32 steps, the fastest measured (docs/kernels.md#causal-conv1d); Triton tiles that compile
    without spilling for an H100 at width 4 (``compare.kernels.triton_ir``: forward 72 registers, backward 167).
    ``backend="triton"`` or ``"mosaic_gpu"`` asks for one backend (a Mosaic GPU request it does not cover is
    refused); ``bwd_backend`` sets the backward's apart ("": the same as ``backend``)."""

    block_l: int = 32  # forward: time steps per program
    block_d: int = 64  # forward: channels per program (contiguous in memory)
    num_warps: int = 4
    bwd_block_l: int = 32
    bwd_block_d: int = 64
    bwd_num_warps: int = 4
    backend: str = "auto"
    bwd_backend: str = ""
    mosaic_block_l: int = 32  # steps per TMA block (at least 8)
    mosaic_block_d: int = 256  # channels a Mosaic GPU program: 128 or 256 (128 where dim is no multiple of 256)
    mosaic_segment_blocks: int = 2  # blocks a Mosaic GPU program walks
    mosaic_unroll: int = 1  # steps a Mosaic GPU loop iteration (a power of two, at most mosaic_block_l)

    def validate(self) -> None:
        for name in (
            "block_l",
            "block_d",
            "num_warps",
            "bwd_block_l",
            "bwd_block_d",
            "bwd_num_warps",
            "mosaic_block_l",
            "mosaic_unroll",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"ConvConfig.{name} must be a positive power of two, got {value!r}")
        if self.mosaic_unroll > self.mosaic_block_l:
            limit = f"at most mosaic_block_l ({self.mosaic_block_l})"
            raise ValueError(f"ConvConfig.mosaic_unroll must be {limit}, got {self.mosaic_unroll}")
        if self.mosaic_block_d not in (128, 256):
            raise ValueError(f"ConvConfig.mosaic_block_d must be 128 or 256, got {self.mosaic_block_d!r}")
        if self.mosaic_block_l < 8:
            raise ValueError(f"ConvConfig.mosaic_block_l must be at least 8, got {self.mosaic_block_l}")
        if not isinstance(self.mosaic_segment_blocks, int) or self.mosaic_segment_blocks < 1:
            raise ValueError(
                f"ConvConfig.mosaic_segment_blocks must be a positive integer, got {self.mosaic_segment_blocks!r}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(f"ConvConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.bwd_backend not in ("", *BACKENDS):
            raise ValueError(f"ConvConfig.bwd_backend must be '' or one of {BACKENDS}, got {self.bwd_backend!r}")

    @property
    def asks_for_mosaic_gpu(self) -> str | None:
        """The field that asks for the Mosaic GPU kernels by name ("backend" or "bwd_backend"), or None."""
        if self.backend == "mosaic_gpu":
            return "backend"
        return "bwd_backend" if self.bwd_backend == "mosaic_gpu" else None
