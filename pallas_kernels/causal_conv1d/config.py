"""Tiling of the Pallas causal conv1d: which backend, steps and channels per program."""

import dataclasses

from pallas_kernels._triton import next_pow2

BACKENDS = ("triton", "mosaic_gpu")


@dataclasses.dataclass(frozen=True)
class ConvConfig:
    """Defaults: the Triton kernels, in tiles that compile without spilling for an H100 at width 4
    (``compare.triton_ir``: forward 72 registers, backward 167; the backward keeps 2 x width - 1 shifted input tiles
    live), the backward's the faster of the two measured on an H100 (docs/kernels.md#causal-conv1d).
    ``backend="mosaic_gpu"`` asks for the Mosaic GPU kernels (``causal_conv1d.dispatch`` says what they cover): a
    program walks ``mosaic_segment_blocks`` blocks of ``mosaic_block_l`` steps. ``bwd_backend`` sets the backward's
    apart ("": the same as ``backend``), e.g. Triton's forward with Mosaic GPU's backward."""

    block_l: int = 32  # forward: time steps per program
    block_d: int = 64  # forward: channels per program (contiguous in memory)
    num_warps: int = 4
    bwd_block_l: int = 32
    bwd_block_d: int = 64
    bwd_num_warps: int = 4
    backend: str = "triton"
    bwd_backend: str = ""
    mosaic_block_l: int = 64  # steps per TMA block (at least 8)
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
    def backward_backend(self) -> str:
        """The backend of the backward kernel."""
        return self.bwd_backend or self.backend

    @property
    def uses_mosaic_gpu(self) -> bool:
        return "mosaic_gpu" in (self.backend, self.backward_backend)
