"""The selective scan's static problem description, shared by the kernels and the dispatch: sizes, which optional
inputs exist, the tiling of one pass (``ScanDims``), from a config and the inputs (``scan_dims``).
"""

import dataclasses

from pallas_kernels._triton import next_pow2
from pallas_kernels.selective_scan.config import ScanConfig
from pallas_kernels.selective_scan.heuristics import segment_length


@dataclasses.dataclass(frozen=True)
class ScanDims:
    """Static problem description: sizes, which optional inputs exist, the tiling."""

    batch: int
    seqlen: int
    dim: int
    groups: int
    dstate: int
    has_D: bool
    has_z: bool
    has_bias: bool
    softplus: bool
    block_d: int
    chunk: int
    prefetch: int
    bwd_unroll: int
    interpret: bool
    save_every: int  # steps between the states the forward saves (the backward: it reads)
    segment_len: int  # chunked forward: steps per segment scanned in parallel with the others

    @property
    def nsegments(self) -> int:
        return -(-self.seqlen // self.segment_len)

    @property
    def nsaved(self) -> int:
        return -(-self.seqlen // self.save_every)

    @property
    def dim_per_group(self) -> int:
        return self.dim // self.groups

    @property
    def np_(self) -> int:
        return next_pow2(self.dstate)

    @property
    def nblocks(self) -> int:
        return -(-self.dim_per_group // self.block_d)

    @property
    def nchunks(self) -> int:
        return -(-self.seqlen // self.chunk)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.batch, self.groups, self.nblocks)


def scan_dims(u, B, A, D, z, delta_bias, softplus_: bool, config: ScanConfig, interpret: bool, *, bwd: bool):
    batch, seqlen, dim = u.shape
    groups, dstate = B.shape[2], B.shape[3]
    block = config.bwd_block_d if bwd else config.block_d
    block_size = min(block, next_pow2(dim // groups))
    return ScanDims(
        batch=batch,
        seqlen=seqlen,
        dim=dim,
        groups=groups,
        dstate=dstate,
        has_D=D is not None,
        has_z=z is not None,
        has_bias=delta_bias is not None,
        softplus=bool(softplus_),
        block_d=block_size,
        chunk=_chunk(config, bwd),
        save_every=config.save_every if bwd else config.kept_every,
        segment_len=segment_length(config, seqlen, batch * groups * -(-(dim // groups) // block_size)),
        prefetch=config.bwd_prefetch if bwd else config.prefetch,
        bwd_unroll=config.bwd_unroll,
        interpret=interpret,
    )


def _chunk(config: ScanConfig, bwd: bool) -> int:
    """Steps per loop iteration: the sequential design's ``chunk``; the chunked design's ``rows`` / ``bwd_rows``."""
    if (config.bwd_design if bwd else config.design) != "chunked":
        return config.chunk
    return config.bwd_rows if bwd else config.rows
