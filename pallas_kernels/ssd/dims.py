"""The SSD's static problem description, shared by both backends and the dispatch: sizes, which optional inputs
exist, dt processing, the tiling (``SsdDims``), and the dims the two-level state passes run with (``segment_dims``).
"""

import dataclasses

from pallas_kernels._triton import next_pow2
from pallas_kernels.ssd.config import MIN_DOT


@dataclasses.dataclass(frozen=True)
class SsdDims:
    """Static problem description: sizes, which optional inputs exist, dt processing, the tiling."""

    batch: int
    seqlen: int
    nheads: int
    headdim: int
    ngroups: int
    dstate: int
    has_D: bool
    has_z: bool
    has_bias: bool
    has_init: bool
    has_seq: bool
    softplus: bool
    dt_limit: tuple[float, float]
    block_l: int
    block_p: int
    interpret: bool
    keep_blocks: int = 1  # blocks between the states the forward keeps for the backward (1: every block's)
    block_n: int = 0  # state columns per program (the sequential passes only; 0: all N)
    has_scores: bool = False  # the per-head kernels read C·Bᵀ per block and group (``block_scores``)

    @property
    def heads_per_group(self) -> int:
        return self.nheads // self.ngroups

    @property
    def np_(self) -> int:
        return max(MIN_DOT, next_pow2(self.dstate))

    @property
    def nb(self) -> int:
        """State columns a program owns: Np, or ``block_n`` of them."""
        return self.np_ if self.block_n == 0 else min(self.block_n, self.np_)

    @property
    def n_blocks(self) -> int:
        return -(-self.dstate // self.nb)

    @property
    def nblocks(self) -> int:
        return -(-self.seqlen // self.block_l)

    @property
    def nkept(self) -> int:
        """States kept for the backward: blocks 0, keep_blocks, 2 keep_blocks, ..."""
        return -(-self.nblocks // self.keep_blocks)

    @property
    def p_blocks(self) -> int:
        return -(-self.headdim // self.block_p)

    def with_block_p(self, block_p: int) -> "SsdDims":
        """The same problem with ``block_p`` head dims per program (a power of two, at most headdim's)."""
        return dataclasses.replace(self, block_p=max(MIN_DOT, min(next_pow2(block_p), next_pow2(self.headdim))))

    def with_state_tiles(self, block_p: int, block_n: int) -> "SsdDims":
        """A sequential pass's tiling: ``block_p`` head dims and ``block_n`` state columns (0: all) per program."""
        return dataclasses.replace(self.with_block_p(block_p), block_n=block_n)

    @property
    def grid(self) -> tuple[int, int, int]:
        """Sequential passes: one program per (batch row, head, headdim block x state-column block) walks all blocks."""
        return (self.batch, self.nheads, self.p_blocks * self.n_blocks)

    @property
    def block_tiles(self) -> int:
        """Block-parallel passes: one program per batch row, block, head and headdim block."""
        return self.batch * self.nblocks * self.nheads * self.p_blocks

    @property
    def block_grid(self) -> tuple[int]:
        """The block-parallel passes' one-axis grid, launched headdim block fastest, then head, then block (see
        ``block_program``)."""
        return (self.block_tiles,)


def ssd_dims(
    x,
    B,
    D,
    z,
    dt_bias,
    initial_states,
    seq_idx,
    softplus_,
    dt_limit,
    block_l,
    block_p,
    interpret,
    checkpoint_every=0,
    shared_scores=False,
):
    batch, seqlen, nheads, headdim = x.shape
    return SsdDims(
        batch=batch,
        seqlen=seqlen,
        nheads=nheads,
        headdim=headdim,
        ngroups=B.shape[2],
        dstate=B.shape[3],
        has_D=D is not None,
        has_z=z is not None,
        has_bias=dt_bias is not None,
        has_init=initial_states is not None,
        has_seq=seq_idx is not None,
        softplus=bool(softplus_),
        dt_limit=(float(dt_limit[0]), float(dt_limit[1])),
        block_l=block_l,
        block_p=max(MIN_DOT, min(block_p, next_pow2(headdim))),
        interpret=interpret,
        keep_blocks=max(1, checkpoint_every // block_l),
        has_scores=bool(shared_scores),
    )


def segment_dims(dims: SsdDims, config) -> SsdDims | None:
    """The dims the two-level state passes run with (``SsdConfig.two_level_states``), their segments as
    ``keep_blocks``: the kept states' intervals where states are dropped, else ``config.state_segment`` positions;
    None where the passes stay one-level (not asked for, or one segment would hold the whole walk)."""
    if not config.two_level_states:
        return None
    if dims.keep_blocks > 1:
        return dims
    blocks = config.state_segment // dims.block_l
    return dataclasses.replace(dims, keep_blocks=blocks) if 1 < blocks < dims.nblocks else None
