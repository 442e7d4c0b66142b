"""What the Triton forward and backward SSD kernels share: a program's loads, one block's decays, the launch.

A program owns batch row ``b`` and head ``h`` (group ``g = h // (H / G)``) and head dims ``p0 + [0, block_p)``;
in the sequential state passes possibly only the state's columns ``n0 + [0, Nb)`` (``block_n``), otherwise all N.
Per block of T positions starting at ``t0`` it sees tiles x (T, block_p), B and C (T, Nb), dt (T,). Sizes that are
not powers of two (headdim, N, the last block) are padded by masked loads: padded rows carry dt = 0, x = B = C = 0,
so they neither decay the state nor add to it.

Decays inside a block are exps of differences of the block's own cumulative log-decay cs (cs_l = sum_{s<=l} dt_s
A), masked before the exp, so for A < 0 no exp sees a positive argument however long the sequence.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from pallas_kernels._triton import exp, sigmoid, softplus
from pallas_kernels.ssd.dims import SsdDims


def block_scores(B: jax.Array, C: jax.Array, block_l: int) -> jax.Array:
    """C·Bᵀ within each block of ``block_l`` positions, per group: (batch, nblocks, G, T, T) float32 from B, C
    (batch, L, G, N) in the dots' dtype; entry [b, k, g, l, s] = C[b, k T + l, g] · B[b, k T + s, g], zero past L.
    In XLA, once per group, for the per-head kernels that would otherwise each recompute it; float32 operands are
    multiplied in full float32, like ``mm``."""
    batch, seqlen, ngroups, dstate = B.shape
    nblocks = -(-seqlen // block_l)

    def blocks(t):
        t = jnp.pad(t, ((0, 0), (0, nblocks * block_l - seqlen), (0, 0), (0, 0)))
        return t.reshape(batch, nblocks, block_l, ngroups, dstate)

    precision = jax.lax.Precision.HIGHEST if B.dtype == jnp.float32 else None
    return jnp.einsum(
        "bklgn,bksgn->bkgls",
        blocks(C),
        blocks(B),
        precision=precision,
        preferred_element_type=jnp.float32,
    )


def mm(a: jax.Array, b: jax.Array, *, trans_a: bool = False, trans_b: bool = False) -> jax.Array:
    """a @ b with float32 accumulation; ``trans_*`` contract the other axis (aᵀ, bᵀ). bf16/fp16 operands run on
    tensor cores; float32 operands are multiplied in full float32 (Triton would round them to TF32 by default)."""
    dims = (((0 if trans_a else 1,), (1 if trans_b else 0,)), ((), ()))
    precision = jax.lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
    return jax.lax.dot_general(a, b, dims, precision=precision, preferred_element_type=jnp.float32)


@dataclasses.dataclass
class Block:
    """One block's positions and decays, float32. Masks are False on padded rows and across sequence boundaries."""

    valid: jax.Array  # (T,) bool: t0 + l < L
    dt: jax.Array  # (T,) dt after bias, softplus and dt_limit; 0 on padded rows
    dt_raw: jax.Array  # (T,) dt + bias, before softplus and the clamp (for the backward)
    cs: jax.Array  # (T,) cumulative dt * A from the block start
    intra: jax.Array | None  # (T, T) exp(cs_l - cs_s) where s <= l in one sequence, else 0 (if asked for)
    from_start: jax.Array  # (T,) exp(cs_l) where l is still in the incoming state's sequence, else 0
    to_end: jax.Array  # (T,) exp(cs_last - cs_s) where s is in the block's last sequence, else 0
    carry: jax.Array  # () exp(cs_last) if the incoming state survives the block, else 0


def sequential_program(dims: SsdDims, b=None, h=None, tile=None) -> "Program":
    """A sequential pass's program: batch row, head and (headdim block x state-column block) ``tile``, by default
    grid axes 0, 1 and 2 (``dims.grid``)."""
    tile = pl.program_id(2) if tile is None else tile
    return Program(dims, (tile // dims.n_blocks) * dims.block_p, b=b, h=h, n0=(tile % dims.n_blocks) * dims.nb)


def segment_program(dims: SsdDims) -> tuple["Program", jax.Array]:
    """A segment-parallel walk's program and its segment (of ``keep_blocks`` blocks), on the one-axis grid
    ``segment_tiles(dims)``: tiles (headdim block x state-column block) fastest, then head, then (batch row,
    segment), so that the programs of one segment, which read its B and C, run together."""
    tiles = dims.p_blocks * dims.n_blocks
    pid = pl.program_id(0)
    tile, rest = pid % tiles, pid // tiles
    h, bs = rest % dims.nheads, rest // dims.nheads
    return sequential_program(dims, b=bs // dims.nkept, h=h, tile=tile), bs % dims.nkept


def segment_block(dims: SsdDims, segment, j, *, reverse: bool = False):
    """Step ``j`` of a walk over ``segment`` (first block first, or last first with ``reverse``): the block's index k,
    whether it exists (the last segment's tail runs past L) and the start of the block it reads (clamped to the last
    block, so that a step past the end reads real rows whose result the walk discards)."""
    k = segment * dims.keep_blocks + (dims.keep_blocks - 1 - j if reverse else j)
    return k, k < dims.nblocks, jnp.minimum(k, dims.nblocks - 1) * dims.block_l


def segment_tiles(dims: SsdDims) -> int:
    """Programs of a segment-parallel walk: batch x segments x heads x (headdim x state-column) tiles."""
    return dims.batch * dims.nkept * dims.nheads * dims.p_blocks * dims.n_blocks


def block_program(dims: SsdDims) -> tuple["Program", jax.Array]:
    """This block-parallel program (its id in the grid ``dims.block_grid``) and the index of its block. Tiles run
    headdim block fastest, then head, then (batch row, block): the programs of one block, which all read its B and C
    (G x T x N each, shared by H / G heads) and the same rows of x, run together and find them in L2. Block-fastest
    order re-reads B and C from DRAM once per head at long L (H100, B1 L65536 H128: L2 hit rate 20% in
    ``ssd_fwd_out``, which moved 11 GB where 6 were needed)."""
    tile = pl.program_id(0)
    part, rest = tile % dims.p_blocks, tile // dims.p_blocks
    h, bk = rest % dims.nheads, rest // dims.nheads
    return Program(dims, part * dims.block_p, b=bk // dims.nblocks, h=h), bk % dims.nblocks


class Program:
    """One program's view of the HBM arrays and the math that sets up a block."""

    def __init__(self, dims: SsdDims, p0=0, b=None, h=None, n0=0):
        self.dims = dims
        self.b = pl.program_id(0) if b is None else b
        self.h = pl.program_id(1) if h is None else h
        self.g = self.h // dims.heads_per_group
        self.p0 = p0
        self.pmask = p0 + jnp.arange(dims.block_p) < dims.headdim
        self.n0 = n0
        self.nmask = n0 + jnp.arange(dims.nb) < dims.dstate
        self.rows = jnp.arange(dims.block_l)

    def valid(self, t0) -> jax.Array:
        return t0 + self.rows < self.dims.seqlen

    def load_heads(self, ref, t0) -> jax.Array:
        """(T, block_p) of a (batch, L, H, P) array, in its dtype."""
        idx = (self.b, pl.ds(t0, self.dims.block_l), self.h, pl.ds(self.p0, self.dims.block_p))
        return plgpu.load(ref.at[idx], mask=self.valid(t0)[:, None] & self.pmask[None, :], other=0)

    def store_heads(self, ref, t0, value, when=None) -> None:
        """Store (T, block_p) into a (batch, L, H, P) array; only where ``when`` (a traced bool) holds, if given."""
        idx = (self.b, pl.ds(t0, self.dims.block_l), self.h, pl.ds(self.p0, self.dims.block_p))
        mask = self.valid(t0)[:, None] & self.pmask[None, :]
        plgpu.store(ref.at[idx], value.astype(ref.dtype), mask=mask if when is None else mask & when)

    @property
    def state_mask(self) -> jax.Array:
        """(block_p, Nb): this program's head dims and state columns that exist."""
        return self.pmask[:, None] & self.nmask[None, :]

    def load_group(self, ref, t0) -> jax.Array:
        """(T, Nb) of a (batch, L, G, N) array (B or C), in its dtype."""
        idx = (self.b, pl.ds(t0, self.dims.block_l), self.g, pl.ds(self.n0, self.dims.nb))
        return plgpu.load(ref.at[idx], mask=self.valid(t0)[:, None] & self.nmask[None, :], other=0)

    def store_group(self, ref, t0, value, slot) -> None:
        """Store (T, Nb) into row ``slot`` of a (batch, L, slots, N) array (the dB or dC partials)."""
        idx = (self.b, pl.ds(t0, self.dims.block_l), slot, pl.ds(self.n0, self.dims.nb))
        plgpu.store(ref.at[idx], value.astype(ref.dtype), mask=self.valid(t0)[:, None] & self.nmask[None, :])

    def load_time(self, ref, t0, other=0) -> jax.Array:
        """(T,) of a (batch, L, H) array."""
        return plgpu.load(ref.at[self.b, pl.ds(t0, self.dims.block_l), self.h], mask=self.valid(t0), other=other)

    def store_time(self, ref, t0, value, *trail) -> None:
        """Store (T,) into a (batch, L, H) array, or at index ``trail`` of the trailing axes of (batch, L, H, ...)."""
        idx = (self.b, pl.ds(t0, self.dims.block_l), self.h, *trail)
        plgpu.store(ref.at[idx], value.astype(ref.dtype), mask=self.valid(t0))

    def state_index(self, *lead):
        return (*lead, pl.ds(self.p0, self.dims.block_p), pl.ds(self.n0, self.dims.nb))

    def load_state(self, ref, *lead) -> jax.Array:
        """(block_p, Nb) of a (..., P, N) array, in its dtype."""
        return plgpu.load(ref.at[self.state_index(*lead)], mask=self.state_mask, other=0)

    def state_or_zeros(self, ref, *lead) -> jax.Array:
        """(block_p, Nb) float32 of a (..., P, N) array, or zeros where there is no array (``ref`` None): a walk's
        starting state."""
        if ref is None:
            return jnp.zeros((self.dims.block_p, self.dims.nb), jnp.float32)
        return self.load_state(ref, *lead).astype(jnp.float32)

    def store_state(self, ref, value, *lead, when=None) -> None:
        """Store (block_p, Nb) into a (..., P, N) array; only where ``when`` (a traced bool) holds, if given."""
        mask = self.state_mask if when is None else self.state_mask & when
        plgpu.store(ref.at[self.state_index(*lead)], value.astype(ref.dtype), mask=mask)

    def keep_state(self, ref, state, k) -> None:
        """The forward's state kept for the backward at block ``k``: every block's in the dot dtype, or with
        ``keep_blocks`` > 1 every keep_blocks-th block's in float32 (the backward rebuilds the rest from it)."""
        if self.dims.keep_blocks == 1:
            self.store_state(ref, state, self.b, k, self.h)
        else:
            kb = self.dims.keep_blocks  # k >= 0: lax's truncating div/rem (jnp's floor forms do not lower to Triton)
            self.store_state(ref, state, self.b, jax.lax.div(k, kb), self.h, when=jax.lax.rem(k, kb) == 0)

    def load_scores(self, ref, k) -> jax.Array:
        """(T, T) float32 C·Bᵀ of block ``k`` and this program's group, from ``block_scores``."""
        return plgpu.load(ref.at[self.b, k, self.g])

    def load_scores_diagonal(self, ref, k) -> jax.Array:
        """(T,) float32 diagonal of block ``k``'s C·Bᵀ for this program's group (``block_scores``' diagonal)."""
        return plgpu.load(ref.at[self.b, k, self.g, pl.ds(0, self.dims.block_l)])

    def load_head_dims(self, ref) -> jax.Array:
        """(block_p,) float32 of an (H, P) array."""
        idx = (self.h, pl.ds(self.p0, self.dims.block_p))
        return plgpu.load(ref.at[idx], mask=self.pmask, other=0).astype(jnp.float32)

    def block(self, t0, dt_ref, A, bias, seq_ref, *, intra: bool = True, below: bool = False) -> Block:
        """Set up the block starting at t0: dt processing, cumulative log-decay, masked decays (the (T, T) intra-block
        decays only if ``intra``: the sequential state passes do not need them; with ``below``, strictly below the
        diagonal, whose decays are exp(0) = 1)."""
        dims = self.dims
        valid = self.valid(t0)
        dt_raw = self.load_time(dt_ref, t0).astype(jnp.float32)
        if bias is not None:
            dt_raw = dt_raw + bias
        dt = softplus(dt_raw, dims.interpret) if dims.softplus else dt_raw
        dt = jnp.where(valid, jnp.clip(dt, dims.dt_limit[0], dims.dt_limit[1]), 0.0)
        cs = jnp.cumsum(dt * A)
        last = self.rows == dims.block_l - 1
        cs_last = jnp.sum(jnp.where(last, cs, 0.0))
        causal = self.rows[:, None] > self.rows[None, :] if below else self.rows[:, None] >= self.rows[None, :]
        intra_mask, start_mask, end_mask, keep = causal, None, None, None
        if seq_ref is not None:
            seq = plgpu.load(seq_ref.at[self.b, pl.ds(t0, dims.block_l)], mask=valid, other=0)
            prev_at = jnp.maximum(t0 - 1, 0)
            seq_prev = jnp.where(t0 > 0, seq_ref[self.b, prev_at], 0)
            seq_last = jnp.max(jnp.where(valid, seq, 0))
            intra_mask = causal & (seq[:, None] == seq[None, :])
            start_mask = seq == seq_prev
            end_mask = seq == seq_last
            keep = seq_last == seq_prev
        interp = dims.interpret
        intra = exp(jnp.where(intra_mask, cs[:, None] - cs[None, :], -jnp.inf), interp) if intra else None
        exp_cs = exp(cs, interp)
        from_start = exp_cs if start_mask is None else jnp.where(start_mask, exp_cs, 0.0)
        to_end_log = cs_last - cs
        to_end = exp(to_end_log if end_mask is None else jnp.where(end_mask, to_end_log, -jnp.inf), interp)
        carry = jnp.sum(jnp.where(last, exp_cs, 0.0))  # exp(cs_last), as a reduction (no scalar inline asm)
        if keep is not None:
            carry = jnp.where(keep, carry, 0.0)
        return Block(valid, dt, dt_raw, cs, intra, from_start, to_end, carry)

    def dt_grad(self, blk: Block, ddt: jax.Array) -> jax.Array:
        """d dt_raw from d dt: zero where dt_limit clamps, times softplus' = sigmoid, zero on padded rows."""
        dims = self.dims
        pre = softplus(blk.dt_raw, dims.interpret) if dims.softplus else blk.dt_raw
        inside = (pre >= dims.dt_limit[0]) & (pre <= dims.dt_limit[1]) & blk.valid
        if dims.softplus:
            ddt = ddt * sigmoid(blk.dt_raw, dims.interpret)
        return jnp.where(inside, ddt, 0.0)


def call_kernel(kernel, inputs, out_shapes, grid, dims: SsdDims, num_warps: int, num_stages: int, name: str):
    """``pl.pallas_call`` on the Triton backend (interpreted on the CPU), refs over whole arrays."""
    return pl.pallas_call(
        kernel,
        out_shape=out_shapes,
        grid=grid,
        interpret=dims.interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        name=name,
    )(*inputs)


def optional_refs(refs, flags):
    """Split the tail of a kernel's ref list into the optional inputs (None where the flag is off)."""
    it = iter(refs)
    return [next(it) if flag else None for flag in flags], list(it)
