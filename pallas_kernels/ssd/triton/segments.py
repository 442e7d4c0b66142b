"""The elementwise walk over segments that joins segment-parallel state passes (``SsdConfig.two_level_states``).

Time is cut into segments of ``keep_blocks`` blocks. A segment-parallel pass gives, per segment s, the state its
own positions leave (from a zero start) ``local[s]`` and the decay of the whole segment ``decay[s]`` (the product of
its blocks' carries: 0 where a sequence starts inside it). A state passing through segment s then leaves it as
``decay[s] * state + local[s]``: this walk applies that, segment after segment, to every (head dim, state column)
element at once. Forward, from the initial state, it gives the state entering each segment (the states the
backward keeps); reverse, from d final_states, the gradient of the state leaving each segment (the backward's
``local`` being the segments' gradient contributions from a zero end).
"""

import functools

import jax
import jax.numpy as jnp

from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.triton.block import call_kernel, optional_refs, sequential_program


def _walk_kernel(local_ref, decay_ref, *refs, dims: SsdDims, has_start: bool, reverse: bool):
    (start_ref,), (out_ref, end_ref) = optional_refs(refs, (has_start,))
    prog = sequential_program(dims)

    def step(i, carry):
        s = dims.nkept - 1 - i if reverse else i
        prog.store_state(out_ref, carry, prog.b, s, prog.h)
        return decay_ref[prog.b, s, prog.h] * carry + prog.load_state(local_ref, prog.b, s, prog.h)

    carry = jax.lax.fori_loop(0, dims.nkept, step, prog.state_or_zeros(start_ref, prog.b, prog.h))
    prog.store_state(end_ref, carry, prog.b, prog.h)


def segment_outputs(dims: SsdDims) -> list[jax.ShapeDtypeStruct]:
    """What a segment-parallel pass gives the walk: each segment's own ``local`` (batch, nkept, H, P, N) and its
    ``decay`` (batch, nkept, H), float32."""
    lead = (dims.batch, dims.nkept, dims.nheads)
    return [
        jax.ShapeDtypeStruct((*lead, dims.headdim, dims.dstate), jnp.float32),
        jax.ShapeDtypeStruct(lead, jnp.float32),
    ]


def segment_walk(local, decay, start, dims: SsdDims, config, *, reverse: bool, name: str):
    """local (batch, nkept, H, P, N) float32, decay (batch, nkept, H) float32, start (batch, H, P, N) float32 or
    None (zeros) -> (the carried state at each segment's start, or with ``reverse`` at its end: (batch, nkept, H, P,
    N) float32; the state after the last step (batch, H, P, N) float32). Grid (batch, H, tiles of
    ``config.state_block_p`` head dims)."""
    batch, _, nheads, headdim, dstate = local.shape
    sdims = dims.with_state_tiles(config.state_block_p, config.state_block_n)
    kernel = functools.partial(_walk_kernel, dims=sdims, has_start=start is not None, reverse=reverse)
    shapes = [
        jax.ShapeDtypeStruct(local.shape, jnp.float32),
        jax.ShapeDtypeStruct((batch, nheads, headdim, dstate), jnp.float32),
    ]
    inputs = [local, decay] + ([start] if start is not None else [])
    out, end = call_kernel(kernel, inputs, shapes, sdims.grid, sdims, config.state_num_warps, config.num_stages, name)
    return out, end
