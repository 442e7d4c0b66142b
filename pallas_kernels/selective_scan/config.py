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
"""

import dataclasses

from pallas_kernels._triton import next_pow2

MAX_DSTATE = 256


DESIGNS = ("sequential", "chunked")


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
    segments: int = 0  # chunked forward: segments of L scanned in parallel (0: enough to fill the GPU)
    checkpoint_every: int = 0  # chunked forward: steps between the states kept for the backward (0: every save_every)

    @property
    def save_every(self) -> int:
        """Steps between the states the forward saves: the backward's chunk."""
        return self.bwd_rows if self.bwd_design == "chunked" else self.chunk

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
        if self.checkpoint_every and self.design != "chunked":
            raise ValueError("ScanConfig.checkpoint_every needs design='chunked' (the forward rerun in the backward)")
        if self.checkpoint_every and self.checkpoint_every < max(self.rows, self.save_every):
            raise ValueError(
                f"ScanConfig.checkpoint_every={self.checkpoint_every} must be a multiple of rows={self.rows} and of "
                f"the backward's chunk ({self.save_every})"
            )
        if self.bwd_unroll > self.chunk:
            raise ValueError(f"ScanConfig.bwd_unroll={self.bwd_unroll} must divide chunk={self.chunk}")


def segment_length(config: ScanConfig, seqlen: int, programs: int) -> int:
    """Steps per forward segment of the chunked design: ``config.segments`` segments, or with 0 one segment when
    the programs of one (batch x groups x channel blocks) fill the GPU, else enough segments for SEGMENT_FILL
    programs; always a multiple of the forward's chunk and of the backward's, where the forward saves states."""
    step = max(config.save_every, config.rows)
    count = config.segments or (1 if programs >= FULL_PROGRAMS else -(-SEGMENT_FILL // programs))
    length = -(-seqlen // count)
    return max(step, -(-length // step) * step)


FULL_PROGRAMS = 1024  # one-warp programs that fill an H100 without splitting time (130m: 1536)
SEGMENT_FILL = 2048  # below that, split L into segments until about this many programs run
KEEP_EVERY = 256  # steps between the states a default forward keeps for the backward: 1/32 of them at chunks of 8
FILL_PROGRAMS = 512  # about 4 one-warp programs per SM of an H100/H200: below this, narrower or time-parallel
SM_COUNT = 132  # H100 / H200 SXM: the default where the device does not say
# The sequential backward's one-warp programs resident per SM at N = 16 by their registers (sm_90, compiled:
# tools/pallas_sass_report.py): 168 per thread with bwd_unroll 2, 254 with 4.
RESIDENT_PER_SM = {2: 12, 4: 8}


def sequential_bwd_unroll(programs: int, sm_count: int = SM_COUNT) -> int:
    """bwd_unroll for ``programs`` sequential-backward programs: 4 (twice the steps in flight per program, 10% faster
    per wave) unless its larger register file needs more waves of programs than 2 does. Each wave costs a whole
    walk of L, so the count of waves decides (measured on an H100: docs/kernels.md#selective-scan-default-config)."""
    waves = {u: -(-programs // (per_sm * sm_count)) for u, per_sm in RESIDENT_PER_SM.items()}
    return 4 if waves[4] == waves[2] else 2


def default_config(
    dstate: int,
    dim_per_group: int,
    programs_per_channel: int = 1,
    checkpoint_every: int = KEEP_EVERY,
    sm_count: int = SM_COUNT,
) -> ScanConfig:
    """The tiling measured best on an H100 for N = 16, scaled for N (docs/kernels.md#selective-scan-default-config).

    ``programs_per_channel`` is batch x groups. Where batch x groups x channel blocks of 8 gives at least
    FILL_PROGRAMS one-warp programs, the backward is the sequential design's (8 channels per program, states every
    8 steps, ``sequential_bwd_unroll`` steps reversed together on ``sm_count`` SMs) and the forward the chunked
    one with chunks of 16 steps (saving states inside them); otherwise the backward is the chunked design's (every
    chunk of 8 steps in parallel) and the forward's chunks have 8 steps, with segments of L in parallel. Either
    way the forward keeps the state only every ``checkpoint_every`` steps (KEEP_EVERY; 0 keeps every state the
    backward reads: no rebuild, more memory) and the backward rebuilds the rest. Forward tiles (rows, Np, block_d)
    hold at most 2048 elements per warp (block_d 8 at N = 16), the chunked backward's 512.
    """
    np_ = next_pow2(dstate)
    block = min(max(1, 128 // np_), next_pow2(dim_per_group))
    sequential_block = max(1, min(block, 128 // np_))
    programs = programs_per_channel * -(-dim_per_group // sequential_block)
    if programs >= FILL_PROGRAMS:
        unroll = sequential_bwd_unroll(programs, sm_count)
        rows, backward = 16, dict(bwd_design="sequential", bwd_block_d=sequential_block, chunk=8, bwd_unroll=unroll)
    else:
        bwd_rows, bwd_block = 8, max(1, min(8, 128 // np_, next_pow2(dim_per_group)))
        bwd_warps = min(8, max(1, bwd_rows * np_ * bwd_block // 512))
        rows = 8
        backward = dict(bwd_design="chunked", bwd_rows=bwd_rows, bwd_block_d=bwd_block, bwd_num_warps=bwd_warps)
    warps = max(1, rows * np_ * block // 2048)
    return ScanConfig(
        design="chunked", block_d=block, num_warps=warps, rows=rows, checkpoint_every=checkpoint_every, **backward
    )
