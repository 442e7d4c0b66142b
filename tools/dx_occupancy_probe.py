"""How ``ssd_bwd_dx`` (the backward's per-head Mosaic GPU kernel) responds to fewer programs an SM and to less work a
program: ``python tools/dx_occupancy_probe.py [SHAPE ...] [--forms FORM ...]`` on a Hopper GPU (shapes:
``compare.kernels``' SSD names, default ``long 130m``; forms below, default all).

Times the kernel alone (no ``finish_dx``), median of 10 samples of 200 ms, on random inputs of the shape:
- ``base``: as the backward calls it (z and D per head, as ``compare.kernels --op ssd`` gives them);
- ``pad``: the same program with 64 KB more shared memory, so one program an SM instead of two;
- ``noz``: without z (no gate: no sigmoid, no dz, one tile fewer to load and store);
- ``noBC``, ``noS``: ``base`` with B and C (read from L2: every head of a group reads the same), or S_in and dS, never
  copied into shared memory (the products read what the buffers hold: timing only, the results are wrong).
If ``pad`` takes about twice ``base``, the kernel waits on latencies that a second program an SM hides; ``noz``
against ``base`` prices the gate's instructions and bytes, ``noBC`` and ``noS`` the copies. Prints one line a variant:
us a call, GB moved (inputs once, outputs), GB/s.
"""

import argparse
import dataclasses

import jax
import jax.numpy as jnp
from jax.experimental.pallas import mosaic_gpu as plgpu

from compare.kernels import bench as kernels
from compare.kernels import ops as kernel_ops
from pallas_kernels.ssd.dims import SsdDims
from pallas_kernels.ssd.mosaic_gpu import backward_dx as kernel_module
from pallas_kernels.ssd.mosaic_gpu.backward_dx import dx_kernel_call, dx_kernel_inputs
from pallas_kernels.ssd.mosaic_gpu.common import TILE, block_decays

PAD_BYTES = 64 * 1024
# the kernel's copies and waits in the order it issues them (z and D present): which to leave out for noBC and noS
COPIES = ("dout", "z", "x", "dt", "cs", "cs_cols", "to_end", "B", "C", "S", "dS", "D")
WAITS = ("dout", "z", "x", "dt", "cs", "cs_cols", "to_end", "B", "C", "S", "D", "dS")


class SkippingCopies:
    """Stands for ``plgpu`` in the kernel's module: the copies (and their waits) of ``skip`` are not issued."""

    def __init__(self, skip: tuple[str, ...]):
        self.skip, self.copies, self.waits = skip, 0, 0

    def __getattr__(self, name):
        return getattr(plgpu, name)

    def copy_gmem_to_smem(self, *args, **kwargs):
        self.copies += 1
        if COPIES[self.copies - 1] not in self.skip:
            plgpu.copy_gmem_to_smem(*args, **kwargs)

    def barrier_wait(self, *args, **kwargs):
        self.waits += 1
        if WAITS[self.waits - 1] not in self.skip:
            plgpu.barrier_wait(*args, **kwargs)


def dx_call(dims: SsdDims, arrays: dict, pad: bool, skip: tuple[str, ...] = ()):
    """A call of the kernel (``dx_kernel_call``, jitted) on ``arrays``, with ``PAD_BYTES`` of unused shared memory
    added when asked and the copies named in ``skip`` left out, and the bytes its inputs and outputs take."""
    decays = (arrays["dt_p"], arrays["cs"], arrays["to_end"])
    operands = [arrays[k] for k in ("B", "C", "D", "z", "states", "dstates", "dout")]
    inputs = dx_kernel_inputs(arrays["x"], decays, *operands, dims)
    extra = (plgpu.SMEM((PAD_BYTES // 4,), jnp.float32),) if pad else ()

    def wrap(body):
        def altered(*refs):
            seen = kernel_module.plgpu = SkippingCopies(skip)
            try:
                body(*refs[: len(refs) - len(extra)])
            finally:
                kernel_module.plgpu = plgpu
            # the names above hold only while the kernel issues these copies and waits (z and D present)
            assert not skip or (seen.copies, seen.waits) == (len(COPIES), len(WAITS)), (seen.copies, seen.waits)

        return altered

    run = jax.jit(lambda *a: dx_kernel_call(list(a), dims, wrap, extra))
    outputs = jax.eval_shape(run, *inputs)
    moved = sum(a.nbytes for a in inputs) + sum(o.size * o.dtype.itemsize for o in outputs)
    return (lambda: run(*inputs)), moved


def probe_inputs(shape: tuple, interpret: bool = False, seed: int = 0) -> tuple[SsdDims, dict]:
    """The kernel's problem and random inputs (drawn on the device) for an SSD shape (batch, L, H, P, N, G, chunk):
    z and D as ``compare.kernels --op ssd`` gives them, dt after bias and softplus, block states and their gradients
    in bf16 as the backward hands them over."""
    batch, seqlen, nheads, headdim, dstate, groups, _ = shape
    keys = iter(jax.random.split(jax.random.key(seed), 16))
    normal = lambda *s: jax.random.normal(next(keys), s, jnp.bfloat16)  # noqa: E731
    dt = 0.5 * jax.random.normal(next(keys), (batch, seqlen, nheads), jnp.float32)
    A = -jax.random.uniform(next(keys), (nheads,), jnp.float32, 1.0, 16.0)
    bias = jnp.full((nheads,), -3.0, jnp.float32)
    dims = SsdDims(batch, seqlen, nheads, headdim, groups, dstate, True, True, True, False, False, True,
                   (0.0, float("inf")), TILE, TILE, interpret)  # fmt: skip
    dt_p, cs, to_end = block_decays(dt, A, bias, dims)
    nblocks = seqlen // TILE
    arrays = {
        "x": normal(batch, seqlen, nheads, headdim),
        "dout": normal(batch, seqlen, nheads, headdim),
        "z": normal(batch, seqlen, nheads, headdim),
        "B": normal(batch, seqlen, groups, dstate),
        "C": normal(batch, seqlen, groups, dstate),
        "states": normal(batch, nblocks, nheads, headdim, dstate),
        "dstates": normal(batch, nblocks, nheads, headdim, dstate),
        "dt_p": dt_p,
        "cs": cs,
        "to_end": to_end,
        "D": jnp.ones((nheads, headdim), jnp.float32),
        "dt": dt,
        "A": A,
        "dt_bias": bias,
    }
    return dims, arrays


def variants(dims: SsdDims) -> dict[str, tuple[SsdDims, bool, tuple[str, ...]]]:
    """name: (problem, pad, copies left out), the module docstring's forms."""
    return {
        "base": (dims, False, ()),
        "pad": (dims, True, ()),
        "noz": (dataclasses.replace(dims, has_z=False), False, ()),
        "noBC": (dims, False, ("B", "C")),
        "noS": (dims, False, ("S", "dS")),
    }


def probe(shape_name: str, forms: list[str] | None = None) -> None:
    """Times each of ``forms`` (all five where None) at one of ``compare.kernels``' SSD shapes; one line each."""
    dims, arrays = probe_inputs(kernel_ops.OPS["ssd"].shapes[shape_name])
    for name, (variant_dims, pad, skip) in variants(dims).items():
        if forms is not None and name not in forms:
            continue
        call, moved = dx_call(variant_dims, arrays, pad, skip)
        ms = kernels.median_ms(call, kernels.jax_sync, 10, 200)
        print(f"{shape_name:6s} {name:5s} {ms * 1e3:9.1f} us  {moved / 1e9:6.2f} GB  {moved / ms / 1e6:7.0f} GB/s",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", default=["long", "130m"])
    parser.add_argument("--forms", nargs="+", choices=["base", "pad", "noz", "noBC", "noS"], help="default: all")
    args = parser.parse_args()
    print(jax.devices()[0].device_kind, flush=True)
    for shape in args.shapes:
        probe(shape, args.forms)
