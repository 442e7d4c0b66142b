"""What the Mosaic GPU SSD kernels share: their tile, shared-memory layout, cover, per-position decays and products
into accumulators that start at a value.

Each of them (``mosaic_gpu.forward``, ``mosaic_gpu.states``, ``mosaic_gpu.backward_dx``, ``mosaic_gpu.backward_dbc``) is
one warpgroup working on blocks of TILE positions and TILE head dims, with 16-bit tiles in shared memory in rows of
64 elements (128-byte swizzle, what ``wgmma`` reads). The per-position decays come from XLA as (batch, H, L) float32
vectors, so that a program reads them with the tensor-memory accelerator like any other tile.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from pallas_kernels._mosaic_gpu import call_kernel as mosaic_call_kernel
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.reference import process_dt

TILE = 64  # positions per block and head dims per program: one warpgroup's wgmma rows
MAX_DSTATE = 256  # shared memory: the backward's B, C, S_in and dS at N 256 are 128 KB of a program's 227
TRANSFORMS = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))  # 16-bit rows of 64: 128-byte swizzle


def covers_tiles(dims: SsdDims, dtype) -> bool:
    """The Mosaic GPU kernels' common cover: 16-bit inputs in blocks of 64 positions, head dims and N in tiles of 64
    (N <= MAX_DSTATE), no seq_idx."""
    return (
        dims.block_l == TILE
        and dims.headdim % TILE == 0
        and dims.dstate % TILE == 0
        and dims.dstate <= MAX_DSTATE
        and dims.seqlen % TILE == 0
        and not dims.has_seq
        and jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    )


def call_kernel(body, inputs: list, *, dims, **kwargs):
    """``_mosaic_gpu.call_kernel`` in Pallas's GPU interpreter where ``dims.interpret``."""
    return mosaic_call_kernel(body, inputs, interpret=dims.interpret, **kwargs)


def block_cumsums(dt: jax.Array, A: jax.Array, dt_bias, dims: SsdDims) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dt after bias, softplus and dt_limit, its cumulative dt·A from each block's start (cs) and that sum over the
    whole block (cs_last, the same value at each of the block's positions), each (batch, H, L) float32, from dt
    (batch, L, H) and A (H,)."""
    proc = jnp.moveaxis(process_dt(dt, dt_bias, dims.softplus, dims.dt_limit), 1, 2)
    return decay_vectors(proc, proc * A.astype(jnp.float32)[None, :, None])


def decay_vectors(scale: jax.Array, log_decay: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The kernels' per-position vectors for any decay, not only Mamba-2's dt·A (Mamba-3's is its own input): each
    input's weight ``scale``, the cumulative ``log_decay`` from each block's start (cs) and its sum over the whole
    block (cs_last), each (batch, H, L) float32 from scale and log_decay (batch, H, L), L a multiple of TILE."""
    batch, nheads, seqlen = scale.shape
    cs = jnp.cumsum(log_decay.astype(jnp.float32).reshape(batch, nheads, seqlen // TILE, TILE), axis=-1)
    last = jnp.broadcast_to(cs[..., -1:], cs.shape)
    whole = lambda t: t.reshape(batch, nheads, seqlen)  # noqa: E731
    return scale.astype(jnp.float32), whole(cs), whole(last)


def block_decays(dt: jax.Array, A: jax.Array, dt_bias, dims: SsdDims) -> tuple[jax.Array, jax.Array, jax.Array]:
    """dt after bias, softplus and dt_limit, cs and cs_last - cs (``block_cumsums``), each (batch, H, L) float32:
    the backward kernels' per-position inputs."""
    return backward_vectors(block_cumsums(dt, A, dt_bias, dims))


def backward_vectors(vectors: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The forward's (scale, cs, cs_last) as the backward kernels read them: (scale, cs, cs_last - cs)."""
    scale, cs, last = vectors
    return scale, cs, last - cs


def products(inits, pairs, interpret: bool, meanwhile=None) -> tuple[jax.Array, ...]:
    """inits[i] + a_i b_i for each pair (a_i, b_i): every ``wgmma`` issued into an accumulator that starts at its init
    (so that the (64, N) state is never in registers twice), then ``meanwhile()`` (work that runs while they do; it
    may write refs only), then the results. b_i is a shared-memory operand; a_i one too, or a 16-bit array in
    ``wgmma``'s register layout. ``meanwhile`` may return more pairs, issued as it returns them into the
    accumulators of the inits beyond ``pairs``: products whose left operand it forms in registers while the first
    ones run. Pallas's GPU interpreter has no accumulator that starts at a value (``pl.run_state``) and no register
    operand: there the products go into zeroed accumulators (those from registers by ``jnp.dot``) and are added
    after."""

    def run(accs) -> list:
        """Issues every product; returns those the interpreter left to ``jnp.dot`` as (index, a b)."""
        skipped = []
        for i, (a, b) in enumerate(pairs):
            skipped += _issue(accs[i], a, b, i, interpret)
        late = (meanwhile() or []) if meanwhile is not None else []
        for i, (a, b) in enumerate(late, start=len(pairs)):
            skipped += _issue(accs[i], a, b, i, interpret)
        return skipped

    if not interpret:

        def issue(accs) -> None:
            run(accs)

        return pl.run_state(issue)(tuple(plgpu.ACC.init(v) for v in inits))

    def scoped(*accs):
        skipped = dict(run(accs))
        return tuple(acc[...] + skipped.get(i, 0.0) for i, acc in enumerate(accs))

    done = pl.run_scoped(scoped, *(plgpu.ACC(v.shape, jnp.float32) for v in inits))
    return tuple(v + q for v, q in zip(inits, done, strict=True))


def _issue(acc, a, b, index: int, interpret: bool) -> list:
    """acc += a b on ``wgmma``; in the interpreter, whose ``wgmma`` reads refs only, a in registers gives
    [(index, a b)] to add instead."""
    if interpret and not _is_ref(a):
        return [(index, jnp.dot(a, b[...], preferred_element_type=jnp.float32))]
    plgpu.wgmma(acc, a, b)
    return []


def _is_ref(operand) -> bool:
    """Whether a product's operand is a (shared-memory) ref rather than an array in registers."""
    return hasattr(operand, "transforms") or isinstance(jax.typeof(operand), jax.ref.AbstractRef)
