"""The backward's per-head kernel (``ssd_bwd_dx``'s math) on Pallas's Mosaic GPU backend: one program per (batch
row, block of 64 positions, head, 64 head dims), one warpgroup, every input brought into shared memory by the
tensor-memory accelerator (TMA) at the program's start, every product on ``wgmma``.

The Triton kernel (``triton.backward._dx_tile``) holds its tiles in registers: 250-255 of them a thread, two 4-warp
programs per SM, whose loads the scheduler then waits on (H200, ncu: 40% of the cycles between a warp's instructions
are L1TEX waits, DRAM at 22% of its peak). Here the inputs wait in shared memory and (64, 64) float32 tiles are 32
registers a thread. Two things make it fast (H100, 130m, ncu; ``docs/kernels.md#ssd-backward-per-head-kernel``):

- at most two (64, 64) accumulators live at a time (the products in three scopes). With all four (T, P) products in
  one scope it spills (255 registers, 6.6 million local-memory requests) and takes 414 us; in three scopes 224
  registers, no spills, 227 us, DRAM at 76% of its peak;
- five (64, 64) tiles of shared memory reused (x, then dx; dout, then dy; z, then dz / ypre, then dz; M; X) beside
  B, C, S_in and dS: 112 KB at N 128, so two programs share an SM.

On an H200 (ncu) it is bound by its own instructions: about 3,200 a warp a program, two warps a scheduler issuing
0.45 a cycle, the waits for its loads 9% of the stall samples. dD is a float32 column sum of dy x: the diagonal of a
``wgmma`` on bf16 dy is cheaper but misses mamba-ssm's dD accuracy, which sums float32 dy x.

A program looping over several heads of a group (C·Bᵀ once, the next head's loads during this head's math) is
slower in every case measured (B1 L65536 H128: 27.4-28.5 ms forward+backward against 22.8 with the Triton kernel;
``docs/kernels.md#tried-and-did-not-pay``).

Per program, with T = 64 positions i (rows of M) and j (columns), cs the block's cumulative dt·A (from XLA):

    M  = C Bᵀ ∘ exp(cs_i - cs_j) below the diagonal, in the dot dtype (Mᵀ dy reads its tile transposed)
    dX = Mᵀ dy + diag(C Bᵀ) ∘ dy + to_end ∘ (B dSᵀ),   dx = dt dX + D dy,   dD = Σ_i dy x,
    ypre = M X + diag(C Bᵀ) ∘ X + from_start ∘ C S_inᵀ + D x,   dz = dout ypre silu'(z)
    d cs (row sums, as ``triton.backward._dcs_rowwise``) = dy · (M X + from_start ∘ C S_inᵀ) - X · Mᵀ dy - q,
    q = to_end ∘ (X · B dSᵀ)

with dy = dout silu(z), X = dt x. The pre-gate output ypre is recomputed from the products d cs needs anyway, so the
forward does not store it (1.07 GB written and read again at B1 L65536 H128 P64, ``dx_on_mosaic``). The kernel
leaves d cs, q and x · dX per position and S_in · dS per head dim; ``finish_dx`` (XLA) adds the state's carry and
q's sum to each block's last d cs, takes the reverse cumulative sum and forms ddt, dA and d dt_bias from it, as the
Triton kernel does in registers. Those are (batch, H, L) float32 arrays, a few bytes per position and head.

Covered shapes (``mosaic_dx_supported``): block_l 64, head dims and N multiples of 64 (N <= 256), L a multiple of 64,
16-bit inputs, no seq_idx. Elsewhere the Triton kernel runs.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import sigmoid
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.mosaic_gpu.common import TILE, TRANSFORMS, call_kernel, covers_tiles


def mosaic_dx_supported(dims: SsdDims, dtype) -> bool:
    """Whether the Mosaic GPU kernel covers this problem (else the Triton kernel runs)."""
    return covers_tiles(dims, dtype)


def ssd_bwd_dx_mosaic(*refs, dims: SsdDims, parts: int):
    """One (batch row, block, head, 64 head dims): loads, the six products, the stores (module docstring)."""
    n_in, n_out = 9 + dims.has_D + dims.has_z, 6 + dims.has_z
    ins, outs, scratch = refs[:n_in], refs[n_in : n_in + n_out], refs[n_in + n_out :]
    x_ref, B_ref, C_ref, states_ref, dstates_ref, dout_ref, dt_ref, cs_ref, end_ref, *opt = ins
    D_ref = opt.pop(0) if dims.has_D else None
    z_ref = opt[0] if dims.has_z else None
    dx_ref, dD_ref, sds_ref, dcs_ref, q_ref, xdx_ref, *dz_out = outs
    (x_s, dout_s, z_s, M_s, X_s, B_s, C_s, S_s, dS_s, rows_s, cols_s, barriers) = scratch

    hp, k, b = lax.axis_index("hp"), lax.axis_index("block"), lax.axis_index("batch")
    h, part = hp // parts, hp % parts
    g = h // dims.heads_per_group
    t, p = pl.ds(k * TILE, TILE), pl.ds(part * TILE, TILE)
    f32, dtype = jnp.float32, x_s.dtype
    wg = plgpu.Layout.WGMMA
    rows_v, cols_v = wg.reduce(1), wg.reduce(0)  # vectors over a tile's rows / columns

    copies = {"dout": (dout_ref.at[b, t, h, p], dout_s)}  # in the order the program waits for them
    if dims.has_z:
        copies["z"] = (z_ref.at[b, t, h, p], z_s)
    copies |= {
        "x": (x_ref.at[b, t, h, p], x_s),
        "dt": (dt_ref.at[b, h, t], rows_s.at[0]),
        "cs": (cs_ref.at[b, h, t], rows_s.at[1]),
        "cs_cols": (cs_ref.at[b, h, t], cols_s.at[0]),
        "to_end": (end_ref.at[b, h, t], rows_s.at[2]),
        "B": (B_ref.at[b, t, g], B_s),
        "C": (C_ref.at[b, t, g], C_s),
        "S": (states_ref.at[b, k, h, p], S_s),
        "dS": (dstates_ref.at[b, k, h, p], dS_s),
    }
    if D_ref is not None:
        copies["D"] = (D_ref.at[h, p], cols_s.at[1])
    for i, (src, dst) in enumerate(copies.values()):
        plgpu.copy_gmem_to_smem(src, dst, barriers.at[i])
    slot = {name: i for i, name in enumerate(copies)}

    def wait(*names):
        for name in names:
            plgpu.barrier_wait(barriers.at[slot[name]])

    wait("dout")
    dout = plgpu.load(dout_s, layout=wg).astype(f32)
    if dims.has_z:
        wait("z")
        z = plgpu.load(z_s, layout=wg).astype(f32)
        sz = sigmoid(z)
        gate = dout * sz
        dy = gate * z
        # dz / ypre = dout sz (1 + z (1 - sz)), in z's buffer until ypre is known
        z_s[...] = (gate + dy * (1.0 - sz)).astype(dtype)
    else:
        dy = dout
    dout_s[...] = dy.astype(dtype)  # dy, the B operand of Mᵀ dy, in dout's buffer

    wait("x", "dt", "cs", "cs_cols", "to_end")
    dt_r, cs_r = plgpu.load(rows_s.at[0], layout=rows_v), plgpu.load(rows_s.at[1], layout=rows_v)
    on_rows = lambda v: lax.broadcast_in_dim(v, (TILE, TILE), [0])  # noqa: E731
    on_cols = lambda v: lax.broadcast_in_dim(v, (TILE, TILE), [1])  # noqa: E731
    x = plgpu.load(x_s, layout=wg).astype(f32)
    cols_s[2] = jnp.sum(dy * x, axis=0)  # dD's share of this block, from float32 dy as mamba-ssm's
    X_s[...] = (x * on_rows(dt_r)).astype(dtype)  # X = dt x, the B operand of M X

    wait("B", "C")
    acc = plgpu.ACC((TILE, TILE), f32)  # zeroed at the start of its scope

    def scores(M_acc):
        plgpu.wgmma(M_acc, C_s, B_s.transpose((1, 0)))  # [i, j] = C_i · B_j
        return M_acc[...]

    M = pl.run_scoped(scores, acc)
    row = plgpu.broadcasted_iota(jnp.int32, (TILE, TILE), 0, layout=wg)
    col = plgpu.broadcasted_iota(jnp.int32, (TILE, TILE), 1, layout=wg)
    # a shared-memory buffer is read in one register layout: cs has a copy for the columns
    log_decay = on_rows(cs_r) - on_cols(plgpu.load(cols_s.at[0], layout=cols_v))  # [i, j] = cs_i - cs_j
    M_diag = jnp.sum(jnp.where(row == col, M, 0.0), axis=1).astype(dtype).astype(f32)
    # M below the diagonal, in the dot dtype: both M X and Mᵀ dy read these values, so that d cs's two sums of
    # W = dM ∘ M cancel over the block as W's own row and column sums would
    # (an overflow above the diagonal, where cs_i > cs_j, is selected away)
    M_s[...] = jnp.where(row > col, M * jnp.exp(log_decay), 0.0).astype(dtype)
    plgpu.commit_smem()
    wait("S")

    # the products in three scopes, so that at most two (T, P) accumulators are live (the registers spilled at four)
    def to_outputs(MX_acc, CS_acc):
        plgpu.wgmma(MX_acc, M_s, X_s)  # M X below the diagonal (rows i)
        plgpu.wgmma(CS_acc, C_s, S_s.transpose((1, 0)))  # C S_inᵀ
        return MX_acc[...], CS_acc[...]

    MX, CS = pl.run_scoped(to_outputs, acc, acc)
    from_start = on_rows(jnp.exp(cs_r))
    dy_mm = dy.astype(dtype).astype(f32)  # dy as the dots take it
    output_terms = jnp.sum(dy_mm * MX + dy * (from_start * CS), axis=1)  # d cs's terms through the output
    if D_ref is not None:
        wait("D")
    if dims.has_z:
        # the pre-gate output as the forward formed it: M X below the diagonal, the state's share, then x times the
        # diagonal's dt C·B and D
        on_x = on_rows(M_diag * dt_r)
        if D_ref is not None:
            on_x = on_x + on_cols(plgpu.load(cols_s.at[1], layout=cols_v))
        ypre = MX + from_start * CS + on_x * plgpu.load(x_s, layout=wg).astype(f32)
        z_s[...] = (plgpu.load(z_s, layout=wg).astype(f32) * ypre).astype(dtype)  # dz, stored from z's buffer
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(z_s, dz_out[0].at[b, t, h, p])
    wait("dS")

    def to_inputs(MTdy_acc, BdS_acc):
        plgpu.wgmma(MTdy_acc, M_s.transpose((1, 0)), dout_s)  # Mᵀ dy below the diagonal (rows j)
        plgpu.wgmma(BdS_acc, B_s, dS_s.transpose((1, 0)))  # B dSᵀ
        return MTdy_acc[...], BdS_acc[...]

    MTdy, BdS = pl.run_scoped(to_inputs, acc, acc)
    to_end = jnp.exp(plgpu.load(rows_s.at[2], layout=rows_v))
    X_terms = jnp.sum(plgpu.load(X_s, layout=wg).astype(f32) * MTdy, axis=1)  # X · Mᵀ dy, X as the dot took it
    x = plgpu.load(x_s, layout=wg).astype(f32)
    q = to_end * dt_r * jnp.sum(x * BdS, axis=1)  # to_end and dt are per row: scaled after the sum
    # Mᵀ dy's diagonal term as the dot would form it: both factors rounded to the dot dtype, exact product
    dX = MTdy + on_rows(M_diag) * dy_mm + on_rows(to_end) * BdS
    rows_s[5] = jnp.sum(x * dX, axis=1)
    dx = on_rows(dt_r) * dX
    if D_ref is not None:
        dx = dx + on_cols(plgpu.load(cols_s.at[1], layout=cols_v)) * dy
    x_s[...] = dx.astype(dtype)  # dx, stored from x's buffer
    rows_s[3] = output_terms - X_terms - q
    rows_s[4] = q

    def state_products(SdS_acc):
        plgpu.wgmma(SdS_acc, S_s, dS_s.transpose((1, 0)))  # S_in dSᵀ: its diagonal is S_in · dS by head dim
        return SdS_acc[...]

    SdS = pl.run_scoped(state_products, acc)
    rows_s[6] = jnp.sum(jnp.where(row == col, SdS, 0.0), axis=1)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(x_s, dx_ref.at[b, t, h, p], commit_group=False)
    plgpu.copy_smem_to_gmem(cols_s.at[2], dD_ref.at[b, k, h, p], commit_group=False)
    plgpu.copy_smem_to_gmem(rows_s.at[6], sds_ref.at[b, k, h, p], commit_group=False)
    for i, ref in enumerate((dcs_ref, q_ref, xdx_ref)):
        plgpu.copy_smem_to_gmem(rows_s.at[3 + i], ref.at[b, h, part, t], commit_group=False)
    plgpu.commit_smem_to_gmem_group()
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)


def mosaic_dx(x, dt, A, decays, B, C, D, z, dt_bias, states, dstates, dout, dims: SsdDims):
    """The per-head gradients by the Mosaic GPU kernel: returns dx, ddt (dt's dtype), dA and d dt_bias (batch,
    nblocks, H) float32 (dt_bias: None without one), dD (batch, nblocks, H, P) float32 or None, dz or None.

    x, dout, z (batch, L, H, P) and B, C (batch, L, G, N) in one 16-bit dtype; dt (batch, L, H); A (H,);
    ``decays`` = ``block_decays(dt, A, dt_bias, dims)`` (shared with the dB/dC kernel); D (H, P) float32 or None;
    states, dstates (batch, nblocks, H, P, N), each block's incoming state and the gradient of its outgoing one, in
    x's dtype."""
    inputs = dx_kernel_inputs(x, decays, B, C, D, z, states, dstates, dout, dims)
    dx, dD, sds, dcs, q, xdx, *dz = dx_kernel_call(inputs, dims)
    dt_p, cs, _ = decays
    ddt, dA, dbias = finish_dx(dt, A, dt_bias, dt_p, cs, dcs, q, xdx, sds, dims)
    return dx, ddt, dA, dbias, (dD if D is not None else None), (dz[0] if dz else None)


def dx_kernel_inputs(x, decays, B, C, D, z, states, dstates, dout, dims: SsdDims) -> list:
    """``dx_kernel_call``'s inputs in its order, from ``mosaic_dx``'s arguments: the states in x's dtype, D in
    float32 where given, z where ``dims`` has it."""
    inputs = [x, B, C, states.astype(x.dtype), dstates.astype(x.dtype), dout, *decays]
    inputs += [D.astype(jnp.float32)] if D is not None else []
    return inputs + ([z] if dims.has_z else [])


def dx_kernel_call(inputs: list, dims: SsdDims, wrap=None, extra_scratch: tuple = ()) -> list:
    """``ssd_bwd_dx_mosaic`` on ``inputs`` (x, B, C, states, dstates, dout, dt, cs, cs_last - cs, then D and z where
    ``dims`` has them: ``mosaic_dx``'s, in x's dtype but the float32 vectors and D): dx, dD, S_in · dS, d cs, q,
    x · dX, then dz with z. ``wrap(body)`` and ``extra_scratch`` (appended to the kernel's shared memory, the body's
    last refs) let ``tools/dx_occupancy_probe.py`` time altered forms of the same kernel."""
    x = inputs[0]
    batch, seqlen, nheads, headdim = x.shape
    parts, nblocks, f32 = headdim // TILE, seqlen // TILE, jnp.float32
    tile16 = lambda shape: plgpu.SMEM(shape, x.dtype, transforms=TRANSFORMS)  # noqa: E731
    n = dims.dstate
    scratch = [
        tile16((TILE, TILE)),  # x, then dx
        tile16((TILE, TILE)),  # dout, then dy
        tile16((TILE, TILE)),  # z, then dz / ypre, then dz
        tile16((TILE, TILE)),  # M below the diagonal
        tile16((TILE, TILE)),  # X = dt x
        tile16((TILE, n)),  # B
        tile16((TILE, n)),  # C
        tile16((TILE, n)),  # S_in
        tile16((TILE, n)),  # dS
        plgpu.SMEM((7, TILE), f32),  # vectors over rows: dt, cs, cs_last - cs in; d cs, q, x · dX, S_in · dS out
        plgpu.SMEM((3, TILE), f32),  # vectors over columns: cs, D in; dD out
        plgpu.Barrier(num_barriers=10 + dims.has_z + dims.has_D),  # one per copy in
        *extra_scratch,
    ]
    by_position = jax.ShapeDtypeStruct((batch, nheads, parts, seqlen), f32)
    by_dim = jax.ShapeDtypeStruct((batch, nblocks, nheads, headdim), f32)
    out_type = [jax.ShapeDtypeStruct(x.shape, x.dtype), by_dim, by_dim, by_position, by_position, by_position]
    out_type += [jax.ShapeDtypeStruct(x.shape, x.dtype)] if dims.has_z else []
    body = functools.partial(ssd_bwd_dx_mosaic, dims=dims, parts=parts)
    return call_kernel(
        body if wrap is None else wrap(body),
        inputs,
        out_type=out_type,
        scratch=scratch,
        grid=(nheads * parts, nblocks, batch),
        grid_names=("hp", "block", "batch"),
        name="ssd_bwd_dx",
        dims=dims,
    )


def finish_dx(dt, A, dt_bias, dt_p, cs, dcs, q, xdx, sds, dims: SsdDims):
    """ddt (dt's dtype), dA and d dt_bias (batch, nblocks, H) float32 from the kernel's per-position d cs, q and
    x · dX (batch, H, parts, L) and per-dim S_in · dS (batch, nblocks, H, P), by ``decay_gradients``."""
    batch, seqlen, nheads = dt.shape
    nblocks = seqlen // TILE
    da, xdx = decay_gradients(cs, dcs, q, xdx, sds)
    dt_b = dt_p.reshape(da.shape)
    ddt = xdx + da * A.astype(jnp.float32)[None, :, None, None]
    raw = dt.astype(jnp.float32) + (0.0 if dt_bias is None else dt_bias.astype(jnp.float32))
    raw = jnp.moveaxis(raw, 1, 2).reshape(ddt.shape)
    pre = jax.nn.softplus(raw) if dims.softplus else raw
    if dims.softplus:
        ddt = ddt * jax.nn.sigmoid(raw)
    ddt = jnp.where((pre >= dims.dt_limit[0]) & (pre <= dims.dt_limit[1]), ddt, 0.0)
    dA = jnp.moveaxis(jnp.sum(da * dt_b, axis=3), 1, 2)
    dbias = None if dt_bias is None else jnp.moveaxis(jnp.sum(ddt, axis=3), 1, 2)
    ddt = jnp.moveaxis(ddt.reshape(batch, nheads, nblocks * TILE), 1, 2).astype(dt.dtype)
    return ddt, dA, dbias


def decay_gradients(cs, dcs, q, xdx, sds) -> tuple[jax.Array, jax.Array]:
    """The gradients of each position's log-decay and of its input's scale (``common.decay_vectors``), each (batch,
    H, nblocks, TILE) float32, from the kernel's per-position d cs, q and x · dX (batch, H, parts, L) and per-dim
    S_in · dS (batch, nblocks, H, P): each block's last d cs gets exp(cs_last) S_in · dS + Σ q (the incoming state's
    carry, q's own sum), then the log-decay's gradient is the reverse cumulative sum of d cs within the block; the
    scale's is x · dX."""
    batch, nheads, seqlen = cs.shape
    per_block = lambda v: v.reshape(batch, nheads, seqlen // TILE, TILE)  # noqa: E731
    dcs, q, xdx = (per_block(v.sum(axis=2)) for v in (dcs, q, xdx))
    carry = jnp.exp(per_block(cs)[..., -1])  # (batch, H, nblocks)
    extra = carry * jnp.moveaxis(sds.sum(axis=3), 1, 2) + q.sum(axis=3)
    return lax.cumsum(dcs.at[..., -1].add(extra), axis=3, reverse=True), xdx
