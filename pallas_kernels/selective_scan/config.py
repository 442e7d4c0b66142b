"""Tiling of the Pallas selective scan: which design runs, which channels a program owns and how time is walked.

Two designs, chosen per pass (``design`` for the forward, ``bwd_design`` for the backward):
- ``"chunked"``: time in chunks of ``rows`` steps (``bwd_rows`` in the backward); inside a chunk the recurrence is
  a scan along time over a (rows, N, block_d) tile (``pallas_kernels._linear_scan``), so every step of the chunk
  is in flight at once. The forward gives a program ``block_d`` channels of one batch row and group and one
  segment of L (``segments``); a first kernel finds what each segment does to the state, so that all segments
  then run at once from their true start states. The backward runs every chunk in parallel: a first kernel finds
  what each chunk does to the adjoint, then one program per chunk walks every channel block of its group
  (recompute from the saved state, adjoint as a reverse scan), so dB and dC are summed inside it.
- ``"sequential"``: a program owns one batch row and ``block_d`` channels of one group, for all N states, and
  walks time sequentially in chunks of ``chunk`` unrolled steps. Each step's loads are issued ``prefetch`` steps
  ahead of its arithmetic, so their latency hides behind the steps before it. The backward recomputes inside a
  chunk in sub-chunks of ``bwd_unroll`` steps instead of reading a materialized (L, dim, N) state.
The backward reads the state every ``save_every`` steps, its chunk: ``bwd_rows`` for a chunked backward,
``chunk`` for a sequential one; a sequential forward saves at its own ``chunk`` (so ``bwd_rows`` must equal it),
a chunked one at chunk starts or inside chunks (all these sizes are powers of two, so one divides the other).
With ``checkpoint_every`` (chunked forward only) the forward keeps the state only every that many steps, as
mamba-ssm keeps one per 2048: the backward first rebuilds the states between them by rerunning the forward's
recurrence without its outputs (one more kernel), so that a layer's (L / save_every, N, dim) states exist only
during its own backward instead of from its forward to its backward (the difference in a training step's peak
memory is that size times the layers).
``fwd_backend="mosaic_gpu"`` runs the forward instead as one Mosaic GPU warpgroup per batch row and 128 channels
walking all of L (``mosaic_gpu.sequential_forward``), keeping the states every ``kept_every`` steps as the Triton
forwards do. ``bwd_backend="mosaic_gpu"`` runs the backward as one Mosaic GPU warpgroup per batch row and 128
channels walking L last block to first in blocks of ``chunk`` steps (``mosaic_gpu.sequential_backward``), from the
states at every block start (``save_every`` is then ``chunk``). Either Mosaic GPU pass splits L into ``segments``
walked in parallel (0: ``heuristics.mosaic_segments``) after a first kernel finds each segment's boundary value.
With both passes on Mosaic GPU, ``checkpoint_every`` needs no chunked design: the Mosaic forward kernel rebuilds the
states (``mosaic_gpu.sequential_forward.rebuild_states``).
"""

import dataclasses

from pallas_kernels._triton import next_pow2

MAX_DSTATE = 256


DESIGNS = ("sequential", "chunked")
BACKENDS = ("triton", "mosaic_gpu")
# The Mosaic GPU backward's steps a block (``chunk``): registers hold several rows of each step; its dB and dC sums
# of a block leave in one copy of at least 16 bytes (4 steps of one state in float32)
MOSAIC_MIN_BLOCK, MOSAIC_MAX_BLOCK = 4, 32


@dataclasses.dataclass(frozen=True)
class ScanConfig:
    design: str = "sequential"  # forward
    bwd_design: str = "sequential"
    block_d: int = 16  # forward: channels per program
    num_warps: int = 1
    chunk: int = 8  # sequential: unrolled steps per loop iteration, and between saved states
    prefetch: int = 4  # sequential forward: steps between a load and its use
    bwd_unroll: int = 2  # sequential backward: steps recomputed and reversed together (divides chunk)
    bwd_block_d: int = 8
    bwd_num_warps: int = 1
    bwd_prefetch: int = 1
    rows: int = 4  # chunked forward: time steps scanned together
    bwd_rows: int = 4  # chunked backward: time steps scanned together, and between the states the forward saves
    segments: int = 0  # chunked forward, Mosaic GPU passes: segments of L scanned in parallel (0: automatic)
    checkpoint_every: int = 0  # chunked forward: steps between the states kept for the backward (0: every save_every)
    fwd_backend: str = "triton"  # "mosaic_gpu": the forward as one Mosaic GPU walk per 128 channels (opt-in)
    bwd_backend: str = "triton"  # "mosaic_gpu": the backward as one Mosaic GPU walk per 128 channels (opt-in)

    @property
    def save_every(self) -> int:
        """Steps between the states the forward saves: the backward's chunk."""
        return self.bwd_rows if self.bwd_design == "chunked" and self.bwd_backend == "triton" else self.chunk

    @property
    def kept_every(self) -> int:
        """Steps between the states the forward keeps for the backward: ``checkpoint_every``, else ``save_every``."""
        return self.checkpoint_every or self.save_every

    @property
    def rebuilds_states(self) -> bool:
        """Whether the backward first rebuilds the states every ``save_every`` steps from the kept ones."""
        return self.kept_every != self.save_every

    def validate(self) -> None:
        for name in ("design", "bwd_design"):
            if getattr(self, name) not in DESIGNS:
                raise ValueError(f"ScanConfig.{name} must be one of {DESIGNS}, got {getattr(self, name)!r}")
        for name in ("prefetch", "bwd_prefetch"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ScanConfig.{name} must be a positive int, got {value!r}")
        for name in ("block_d", "num_warps", "chunk", "bwd_unroll", "bwd_block_d", "bwd_num_warps", "rows", "bwd_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value != next_pow2(value):
                raise ValueError(f"ScanConfig.{name} must be a positive power of two, got {value!r}")
        if not isinstance(self.segments, int) or self.segments < 0:
            raise ValueError(f"ScanConfig.segments must be a non-negative int (0: automatic), got {self.segments!r}")
        if self.design == "sequential" and self.bwd_design == "chunked" and self.bwd_rows != self.chunk:
            raise ValueError(
                f"ScanConfig.bwd_rows={self.bwd_rows} must equal chunk={self.chunk} after a sequential forward"
            )
        every = self.checkpoint_every
        if not isinstance(every, int) or every < 0 or (every and every != next_pow2(every)):
            raise ValueError(
                f"ScanConfig.checkpoint_every must be 0 or a positive power of two, got {self.checkpoint_every!r}"
            )
        for name in ("fwd_backend", "bwd_backend"):
            if getattr(self, name) not in BACKENDS:
                raise ValueError(f"ScanConfig.{name} must be one of {BACKENDS}, got {getattr(self, name)!r}")
        if self.bwd_backend == "mosaic_gpu" and not MOSAIC_MIN_BLOCK <= self.chunk <= MOSAIC_MAX_BLOCK:
            raise ValueError(
                f"ScanConfig.chunk={self.chunk} (the Mosaic GPU backward's block) must be from {MOSAIC_MIN_BLOCK} to "
                f"{MOSAIC_MAX_BLOCK}"
            )
        all_mosaic = self.fwd_backend == self.bwd_backend == "mosaic_gpu"  # keeps and rebuilds on its own
        if self.checkpoint_every and self.design != "chunked" and not all_mosaic:
            raise ValueError(
                "ScanConfig.checkpoint_every needs design='chunked' (the forward rerun in the backward) or both "
                "passes on Mosaic GPU"
            )
        if self.checkpoint_every and self.checkpoint_every < max(self.rows, self.save_every):
            raise ValueError(
                f"ScanConfig.checkpoint_every={self.checkpoint_every} must be a multiple of rows={self.rows} and of "
                f"the backward's chunk ({self.save_every})"
            )
        if self.bwd_unroll > self.chunk:
            raise ValueError(f"ScanConfig.bwd_unroll={self.bwd_unroll} must divide chunk={self.chunk}")
