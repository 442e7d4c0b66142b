"""The ops ``compare.kernels`` benchmarks: shapes, model-like inputs, cost model, and the JAX and mamba-ssm calls.

Inputs are float32 numpy rounded to the dtypes they will have, so both sides see the same values. Costs are the
compulsory HBM bytes (inputs read once, outputs written once), the tensor-core FLOPs of the chunked algorithm and
the exps, from which ``compare.kernels`` derives each row's floor.
"""

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pallas_kernels import (
    causal_conv1d_fn,
    mamba_chunk_scan_combined,
    rmsnorm_fn,
    selective_scan_fn,
    selective_state_update,
)
from pallas_kernels.causal_conv1d.config import ConvConfig
from pallas_kernels.mamba3.api import mamba3_siso_combined, mamba3_siso_step
from pallas_kernels.rmsnorm_gated.config import NormConfig
from pallas_kernels.selective_scan.config import ScanConfig
from pallas_kernels.selective_state_update.config import StateUpdateConfig
from pallas_kernels.ssd.api import pallas_config as ssd_pallas_config
from pallas_kernels.ssd.config import SsdConfig


@dataclasses.dataclass
class Variant:
    label: str
    impl: str
    config: object | None = None
    overrides: dict | None = None  # fields laid over each shape's default config (``KernelOp.shape_config``)


def _rounded(arrays: dict, dtypes: dict) -> dict:
    return {k: np.asarray(jnp.asarray(v, dtypes[k]).astype(jnp.float32)) for k, v in arrays.items()}


def _dt_bias(rng, n: int) -> np.ndarray:
    """softplus⁻¹ of log-uniform dt in [1e-3, 0.1], mamba-ssm's init."""
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), n))
    return dt + np.log(-np.expm1(-dt))


class JaxCalls(NamedTuple):
    forward: Callable[[], object]
    forward_backward: Callable[[], object] | None  # None for an op without a backward (a decoding step)
    output: np.ndarray  # the forward's output, float32
    saved_bytes: int  # what the forward keeps for the backward beyond its inputs
    steps_per_call: int = 1  # a decoding step's calls: the steps one ``forward()`` runs (its time is divided by it)


def saved_beyond_inputs(call: Callable, inputs: list) -> int:
    """Bytes of the residuals ``jax.vjp(call, *inputs)`` keeps that are not one of the inputs themselves (in its
    jaxpr, outputs that are not input variables): traced only, nothing runs."""
    closed = jax.make_jaxpr(lambda *xs: jax.vjp(call, *xs)[1])(*inputs)
    forwarded = set(map(id, closed.jaxpr.invars))
    kept = [v.aval for v in closed.jaxpr.outvars if id(v) not in forwarded and hasattr(v, "aval")]
    return sum(math.prod(a.shape) * a.dtype.itemsize for a in kept)


def _jax_calls(fn: Callable, arrays: dict, dtypes: dict, cotangent: np.ndarray, out_dtype: str) -> JaxCalls:
    """jit'ed forward and forward+backward of ``fn(**arrays)``, the forward's output as float32 numpy and the bytes
    it keeps for the backward."""
    names = list(arrays)
    inputs = [jnp.asarray(arrays[k], dtypes[k]) for k in names]
    dout = jnp.asarray(cotangent, out_dtype)

    def call(*xs):
        return fn(**dict(zip(names, xs, strict=True)))

    def output_and_grads(*xs):
        # the output as well as the gradients: a forward+backward returning only the gradients would let XLA drop
        # every forward kernel whose results the backward does not keep (the output itself), which a training step,
        # whose loss reads the output, cannot
        out, vjp = jax.vjp(call, *xs)
        return out, vjp(dout)

    forward = jax.jit(call)
    forward_backward = jax.jit(output_and_grads)
    output = np.asarray(forward(*inputs).astype(jnp.float32))
    saved = saved_beyond_inputs(call, inputs)
    return JaxCalls(lambda: forward(*inputs), lambda: forward_backward(*inputs), output, saved)


# A decoding step is timed as a compiled decoding loop runs it: this many steps a call, both sides (mamba-ssm's as
# one CUDA graph of them), so that neither pays a host dispatch a step, as no user decoding at speed does.
DECODE_LOOP_STEPS = 64


def over_steps(arrays: dict, names: tuple[str, ...], steps: int = DECODE_LOOP_STEPS) -> dict[str, np.ndarray]:
    """{name: (steps, ...) float32} for each of ``names`` in ``arrays`` (None skipped): step k's inputs scaled by
    1 + k / (4 steps), so that every step of a timed loop has inputs of its own, as a model's steps do, and no
    compiler can hoist their work out of the loop."""
    scales = 1 + np.arange(steps) / (4 * steps)
    return {
        k: np.stack([np.asarray(arrays[k], np.float32) * f for f in scales]) for k in names if arrays.get(k) is not None
    }


def decode_loop(step: Callable, inputs: dict, states) -> Callable[[], jax.Array]:
    """A callable running ``step(step_inputs, states) -> (out, states)`` once for each leading index of the arrays in
    ``inputs`` ((steps, ...) each, ``over_steps``) in one jit-compiled loop, each step on the states the one before
    returned (kept in their dtypes), as a compiled decoding loop runs it: no host dispatch between steps. Every call
    starts from ``states``; returns the last step's out."""
    steps = len(next(iter(inputs.values())))
    out_type = jax.eval_shape(step, {k: v[0] for k, v in inputs.items()}, states)[0]

    @jax.jit
    def run(inputs, states):
        def body(i, carry):
            out, carried = step(
                {k: jax.lax.dynamic_index_in_dim(v, i, keepdims=False) for k, v in inputs.items()}, carry[1]
            )
            return out, jax.tree.map(lambda new, old: new.astype(old.dtype), carried, carry[1])

        init = (jnp.zeros(out_type.shape, out_type.dtype), states)
        return jax.lax.fori_loop(0, steps, body, init)[0]

    return lambda: run(inputs, states)


# ---- selective scan (Mamba-1): shape (batch, L, dim, N, G)


def selective_scan_inputs(shape, dtype: str, seed: int) -> tuple[dict, dict, np.ndarray]:
    batch, seqlen, dim, dstate, groups = shape
    rng = np.random.default_rng(seed)
    arrays = {
        "u": rng.normal(size=(batch, seqlen, dim)),
        "delta": rng.normal(0.0, 0.5, (batch, seqlen, dim)),
        "A": -np.tile(np.arange(1, dstate + 1, dtype=np.float64), (dim, 1)),
        "B": rng.normal(size=(batch, seqlen, groups, dstate)),
        "C": rng.normal(size=(batch, seqlen, groups, dstate)),
        "D": np.ones(dim),
        "z": rng.normal(size=(batch, seqlen, dim)),
        "delta_bias": _dt_bias(rng, dim),
    }
    dtypes = {k: dtype for k in ("u", "delta", "B", "C", "z")} | {k: "float32" for k in ("A", "D", "delta_bias")}
    cotangent = _rounded({"c": rng.normal(size=(batch, seqlen, dim))}, {"c": dtype})["c"]
    return _rounded(arrays, dtypes), dtypes, cotangent


def selective_scan_costs(shape, dtype: str) -> dict:
    """The forward+backward counts the decays exp(dt A) twice (forward and its recomputation)."""
    batch, seqlen, dim, dstate, groups = shape
    item = jnp.dtype(dtype).itemsize
    act = batch * seqlen * dim * item  # one of u, delta, z, out, dout, du, ddelta, dz
    bc = batch * seqlen * groups * dstate * item  # one of B, C, dB, dC
    params = dim * dstate * 4 + 2 * dim * 4
    exps = batch * seqlen * dim * dstate
    backward_bytes = 7 * act + 4 * bc + 2 * params
    return {
        "forward": {"bytes": 4 * act + 2 * bc + params, "flops": 0, "exps": exps},
        "forward+backward": {"bytes": 4 * act + 2 * bc + params + backward_bytes, "flops": 0, "exps": 2 * exps},
    }


def selective_scan_jax(variant: Variant, arrays, dtypes, cotangent, shape):
    def fn(**kw):
        return selective_scan_fn(**kw, delta_softplus=True, impl=variant.impl, config=variant.config)

    return _jax_calls(fn, arrays, dtypes, cotangent, dtypes["u"])


def selective_scan_torch(ref, arrays, dtypes, cotangent, shape):
    from torch_reference.kernel_calls import selective_scan_calls

    return selective_scan_calls(ref, arrays, dtypes, cotangent, delta_softplus=True)


# ---- chunked SSD (Mamba-2): shape (batch, L, H, P, N, G, chunk_size)


def ssd_inputs(shape, dtype: str, seed: int) -> tuple[dict, dict, np.ndarray]:
    """Mamba2-like values: A = -U(1, 16) per head, dt_bias from mamba-ssm's init, D = 1 per head."""
    batch, seqlen, nheads, headdim, dstate, groups, _ = shape
    rng = np.random.default_rng(seed)
    arrays = {
        "x": rng.normal(size=(batch, seqlen, nheads, headdim)),
        "dt": rng.normal(0.0, 0.5, (batch, seqlen, nheads)),
        "A": -rng.uniform(1.0, 16.0, nheads),
        "B": rng.normal(size=(batch, seqlen, groups, dstate)),
        "C": rng.normal(size=(batch, seqlen, groups, dstate)),
        "D": np.ones(nheads),
        "z": rng.normal(size=(batch, seqlen, nheads, headdim)),
        "dt_bias": _dt_bias(rng, nheads),
    }
    dtypes = {k: dtype for k in ("x", "dt", "B", "C", "z")} | {k: "float32" for k in ("A", "D", "dt_bias")}
    cotangent = _rounded({"c": rng.normal(size=(batch, seqlen, nheads, headdim))}, {"c": dtype})["c"]
    return _rounded(arrays, dtypes), dtypes, cotangent


def ssd_costs(shape, dtype: str) -> dict:
    """FLOPs of the chunked algorithm at chunk Q, per chunk: C·Bᵀ once per group (Q² N), per head the intra-chunk
    product (Q² P), the chunk state (Q P N) and the incoming state's output (Q P N); the forward+backward counts
    three times the forward (the usual backward = 2 x forward). Exps: the Q x Q decays per head and chunk."""
    batch, seqlen, nheads, headdim, dstate, groups, q = shape
    item = jnp.dtype(dtype).itemsize
    act = batch * seqlen * nheads * headdim * item  # one of x, z, out, dout, dx, dz
    dt = batch * seqlen * nheads * item
    bc = batch * seqlen * groups * dstate * item  # one of B, C, dB, dC
    params = 3 * nheads * 4
    flops = 2 * batch * seqlen * (groups * q * dstate + nheads * (q * headdim + 2 * headdim * dstate))
    exps = batch * seqlen * nheads * q
    forward_bytes = 3 * act + dt + 2 * bc + params
    return {
        "forward": {"bytes": forward_bytes, "flops": flops, "exps": exps},
        "forward+backward": {
            "bytes": forward_bytes + (5 * act + 2 * dt + 4 * bc + 2 * params),
            "flops": 3 * flops,
            "exps": 2 * exps,
        },
    }


def ssd_jax(variant: Variant, arrays, dtypes, cotangent, shape):
    chunk = shape[-1]

    def fn(x, dt, A, B, C, D, z, dt_bias):
        return mamba_chunk_scan_combined(
            x,
            dt,
            A,
            B,
            C,
            chunk,
            D=D,
            z=z,
            dt_bias=dt_bias,
            dt_softplus=True,
            impl=variant.impl,
            config=variant.config,
        )

    return _jax_calls(fn, arrays, dtypes, cotangent, dtypes["x"])


def ssd_shape_config(shape, dtype: str) -> SsdConfig:
    """The config ``impl="pallas"`` picks for the shape on this GPU."""
    batch, seqlen, nheads, headdim, dstate, groups, _ = shape
    return ssd_pallas_config(batch, seqlen, nheads, headdim, dstate, dtype, groups)


def ssd_torch(ref, arrays, dtypes, cotangent, shape):
    from torch_reference.kernel_calls import ssd_calls

    return ssd_calls(ref, arrays, dtypes, cotangent, chunk_size=shape[-1])


# ---- causal conv1d with SiLU (the Mamba blocks' conv): shape (batch, L, dim, width)


def conv_inputs(shape, dtype: str, seed: int) -> tuple[dict, dict, np.ndarray]:
    """x in the compute dtype; weight U(+-1/sqrt(width)) and bias in float32, as the models keep them."""
    batch, seqlen, dim, width = shape
    rng = np.random.default_rng(seed)
    bound = 1 / np.sqrt(width)
    arrays = {
        "x": rng.normal(size=(batch, seqlen, dim)),
        "weight": rng.uniform(-bound, bound, (dim, width)),
        "bias": rng.uniform(-bound, bound, dim),
    }
    dtypes = {"x": dtype, "weight": "float32", "bias": "float32"}
    cotangent = _rounded({"c": rng.normal(size=(batch, seqlen, dim))}, {"c": dtype})["c"]
    return _rounded(arrays, dtypes), dtypes, cotangent


def conv_costs(shape, dtype: str) -> dict:
    """Forward: read x, write out. Backward: read x and dout, write dx (weight and bias are negligible); the
    exps are the SiLU's sigmoids (the backward recomputes them)."""
    batch, seqlen, dim, _ = shape
    act = batch * seqlen * dim * jnp.dtype(dtype).itemsize
    exps = batch * seqlen * dim
    return {
        "forward": {"bytes": 2 * act, "flops": 0, "exps": exps},
        "forward+backward": {"bytes": 5 * act, "flops": 0, "exps": 2 * exps},
    }


def conv_jax(variant: Variant, arrays, dtypes, cotangent, shape):
    def fn(x, weight, bias):
        return causal_conv1d_fn(x, weight, bias, activation="silu", impl=variant.impl, config=variant.config)

    return _jax_calls(fn, arrays, dtypes, cotangent, dtypes["x"])


def conv_torch(ref, arrays, dtypes, cotangent, shape):
    from torch_reference.kernel_calls import causal_conv1d_calls

    return causal_conv1d_calls(ref, arrays, dtypes, cotangent)


# ---- gated RMSNorm (Mamba-2's output norm, z gating first): shape (rows = batch x L, dim, G)


def norm_inputs(shape, dtype: str, seed: int) -> tuple[dict, dict, np.ndarray]:
    """x (the SSD's output) and z in the compute dtype, weight around 1 in float32."""
    rows, dim, _ = shape
    rng = np.random.default_rng(seed)
    arrays = {"x": rng.normal(size=(rows, dim)), "weight": rng.normal(1.0, 0.1, dim), "z": rng.normal(size=(rows, dim))}
    dtypes = {"x": dtype, "weight": "float32", "z": dtype}
    cotangent = _rounded({"c": rng.normal(size=(rows, dim))}, {"c": dtype})["c"]
    return _rounded(arrays, dtypes), dtypes, cotangent


def norm_costs(shape, dtype: str) -> dict:
    """Forward: read x and z, write out. Backward: read x, z and dout, write dx and dz; the exps are silu(z)'s."""
    rows, dim, _ = shape
    act = rows * dim * jnp.dtype(dtype).itemsize
    return {
        "forward": {"bytes": 3 * act, "flops": 0, "exps": rows * dim},
        "forward+backward": {"bytes": 8 * act, "flops": 0, "exps": 3 * rows * dim},
    }


def _norm_options(shape) -> dict:
    return dict(eps=1e-5, group_size=shape[1] // shape[2], norm_before_gate=False)


def norm_jax(variant: Variant, arrays, dtypes, cotangent, shape):
    def fn(x, weight, z):
        return rmsnorm_fn(x, weight, None, z, **_norm_options(shape), impl=variant.impl, config=variant.config)

    return _jax_calls(fn, arrays, dtypes, cotangent, dtypes["x"])


def norm_torch(ref, arrays, dtypes, cotangent, shape):
    from torch_reference.kernel_calls import rmsnorm_gated_calls

    return rmsnorm_gated_calls(ref, arrays, dtypes, cotangent, **_norm_options(shape))


# ---- Mamba-3 SISO (the mixer's sequence op): shape (batch, L, H, P, N, G, S, chunk)

MAMBA3_ARGS = ("Q", "K", "V", "ADT", "DT", "Trap", "Q_bias", "K_bias", "Angles", "D", "Z")


def mamba3_inputs(shape, dtype: str, seed: int) -> tuple[dict, dict, np.ndarray]:
    """As the mixer feeds the op: Q, K (the RMS-normed C and B), V, Z in the compute dtype; A dt < 0 and dt from
    softplus, trapezoid logits and raw angles of order 1, biases around 1, in float32 (Trap and Angles rounded to
    the compute dtype, as mamba-ssm's op rounds them)."""
    batch, seqlen, heads, headdim, dstate, groups, pairs, _ = shape
    rng = np.random.default_rng(seed)
    dt = np.logaddexp(rng.normal(-1.0, 1.0, (batch, heads, seqlen)), 0.0)
    arrays = {
        "Q": rng.normal(size=(batch, seqlen, groups, dstate)),
        "K": rng.normal(size=(batch, seqlen, groups, dstate)),
        "V": rng.normal(size=(batch, seqlen, heads, headdim)),
        "ADT": -(np.logaddexp(rng.normal(size=(batch, heads, seqlen)), 0.0) + 1e-4) * dt,
        "DT": dt,
        "Trap": rng.normal(size=(batch, heads, seqlen)),
        "Q_bias": rng.normal(1.0, 0.1, (heads, dstate)),
        "K_bias": rng.normal(1.0, 0.1, (heads, dstate)),
        "Angles": rng.normal(size=(batch, seqlen, heads, pairs)),
        "D": np.ones(heads),
        "Z": rng.normal(size=(batch, seqlen, heads, headdim)),
    }
    activations = ("Q", "K", "V", "Z")
    dtypes = {k: dtype if k in activations else "float32" for k in MAMBA3_ARGS}
    arrays = _rounded(arrays, dtypes) | _rounded(
        {k: arrays[k] for k in ("Trap", "Angles")}, {"Trap": dtype, "Angles": dtype}
    )
    cotangent = _rounded({"c": rng.normal(size=(batch, seqlen, heads, headdim))}, {"c": dtype})["c"]
    return arrays, dtypes, cotangent


def mamba3_costs(shape, dtype: str) -> dict:
    """Bytes: the inputs read once and out written; the backward reads the inputs and dout again and writes a
    gradient of each input. FLOPs of the chunked form per head and step: q·k and scores·v within the chunk
    (2 chunk (N + P)), the state handed on and read out (4 P N); the backward about twice that again. Exps: the
    within-chunk decays."""
    batch, seqlen, heads, headdim, dstate, groups, pairs, chunk = shape
    item = jnp.dtype(dtype).itemsize
    steps = batch * seqlen
    inputs = steps * (2 * groups * dstate * item + 2 * heads * headdim * item + 3 * heads * 4 + heads * pairs * 4)
    out = steps * heads * headdim * item
    flops = 2 * steps * heads * (chunk * (dstate + headdim) + 2 * headdim * dstate)
    exps = steps * heads * chunk // 2
    return {
        "forward": {"bytes": inputs + out, "flops": flops, "exps": exps},
        "forward+backward": {"bytes": 3 * inputs + 2 * out, "flops": 3 * flops, "exps": 2 * exps},
    }


def mamba3_jax(variant: Variant, arrays, dtypes, cotangent, shape):
    def fn(**kw):
        return mamba3_siso_combined(**kw, chunk_size=shape[-1], impl=variant.impl)

    return _jax_calls(fn, arrays, dtypes, cotangent, dtypes["V"])


def mamba3_torch(ref, arrays, dtypes, cotangent, shape):
    from torch_reference.kernel_calls import mamba3_siso_calls

    return mamba3_siso_calls(ref, arrays, dtypes, cotangent, chunk_size=shape[-1])


# ---- Mamba-3 SISO decoding step: shape (batch, H, P, N, G, S)

MAMBA3_STATES = ("angle", "ssm", "k", "v")
MAMBA3_STEP_INPUTS = ("Q", "K", "V", "ADT", "DT", "Trap", "Angles", "Z")  # new every step; the rest are weights


def mamba3_step_inputs(shape, dtype: str, seed: int) -> tuple[dict, dict, None]:
    """One step's arguments as ``mamba3_inputs`` makes them at L 1 (without the L axis), and the states a decode
    carries into it, float32: angle (batch, H, S), ssm (batch, H, P, N), k (batch, H, N), v (batch, H, P). No
    cotangent: a decoding step has no backward."""
    batch, heads, headdim, dstate, groups, pairs = shape
    arrays, dtypes, _ = mamba3_inputs((batch, 1, heads, headdim, dstate, groups, pairs, 1), dtype, seed)
    step_first = {"Q", "K", "V", "Z", "Angles"}  # (batch, L, ...): L second
    step_last = {"ADT", "DT", "Trap"}  # (batch, H, L)
    arrays = {k: v[:, 0] if k in step_first else v[..., 0] if k in step_last else v for k, v in arrays.items()}
    rng = np.random.default_rng(seed + 1)
    states = {
        "angle": rng.uniform(0.0, 2 * np.pi, (batch, heads, pairs)),
        "ssm": rng.normal(size=(batch, heads, headdim, dstate)),
        "k": rng.normal(size=(batch, heads, dstate)),
        "v": rng.normal(size=(batch, heads, headdim)),
    }
    return arrays | _rounded(states, dict.fromkeys(states, "float32")), dtypes | dict.fromkeys(states, "float32"), None


def mamba3_step_costs(shape, dtype: str) -> dict:
    """Bytes: the step's inputs read, out written, the states read and written (the (batch, H, P, N) float32 ssm
    state dominates). FLOPs per head: the state decayed and updated by two rank-1 terms and read out by q (about
    8 P N). Exps: one decay a head."""
    batch, heads, headdim, dstate, groups, pairs = shape
    item = jnp.dtype(dtype).itemsize
    inputs = batch * (2 * groups * dstate * item + 2 * heads * headdim * item + 3 * heads * 4 + heads * pairs * 4)
    states = batch * heads * (pairs + headdim * dstate + dstate + headdim) * 4
    out = batch * heads * headdim * item
    return {
        "forward": {
            "bytes": inputs + out + 2 * states,
            "flops": 8 * batch * heads * headdim * dstate,
            "exps": batch * heads,
        }
    }


def mamba3_step_jax(variant: Variant, arrays, dtypes, cotangent, shape) -> JaxCalls:
    """The step as a compiled decoding loop runs it (``decode_loop``); ``output`` is one step's."""
    run = functools.partial(mamba3_siso_step, impl=variant.impl)
    args = {k: jnp.asarray(arrays[k], dtypes[k]) for k in MAMBA3_ARGS}
    states = tuple(jnp.asarray(arrays[k], jnp.float32) for k in MAMBA3_STATES)
    output = np.asarray(jax.jit(run)(**args, Input_States=states)[0].astype(jnp.float32))
    inputs = {k: jnp.asarray(v, dtypes[k]) for k, v in over_steps(arrays, MAMBA3_STEP_INPUTS).items()}

    def step(step_inputs, carried):
        out, new = run(**(args | step_inputs), Input_States=carried)
        return out, tuple(new)

    return JaxCalls(decode_loop(step, inputs, states), None, output, 0, DECODE_LOOP_STEPS)


def mamba3_step_torch(ref, arrays, dtypes, cotangent, shape):
    from torch_reference.kernel_calls import mamba3_siso_step_calls

    inputs = over_steps(arrays, MAMBA3_STEP_INPUTS)
    return mamba3_siso_step_calls(ref, arrays, dtypes, MAMBA3_ARGS, MAMBA3_STATES, inputs)


@dataclasses.dataclass(frozen=True)
class KernelOp:
    name: str
    dim_names: tuple[str, ...]
    shapes: dict[str, tuple]
    config_cls: type | None  # the op's tiling dataclass (--pallas-config), None where it has none
    inputs: Callable
    costs: Callable
    jax_calls: Callable
    torch_calls: Callable
    shape_config: Callable | None = None  # (shape, dtype) -> the Pallas config the op's API picks, where shape-aware
    torch_extensions: bool = True  # mamba-ssm's side needs its CUDA extensions (the SSD runs on its Triton kernels)
    impls: tuple[str, ...] = ("pallas",)  # the JAX impls timed without --impls


# ---- selective state update (Mamba-1 and Mamba-2 decoding step): shape (batch, H, P, N, G, family)

STATE_UPDATE_ARGS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")
STATE_UPDATE_STEP_INPUTS = ("x", "dt", "B", "C", "z")  # new every step; the rest are weights


def state_update_inputs(shape, dtype: str, seed: int) -> tuple[dict, dict, None]:
    """One decoding step's arguments as the layers pass them, and the float32 state: family 1 (Mamba-1, H = 1: no
    heads axis; dt, D, dt_bias per channel, A (dim, N) as S4D-real's -(1..N)), family 2 (Mamba-2: dt (batch, H, 1),
    A (H, 1, 1), D and dt_bias (H, 1): one value a head); x, z, B, C in ``dtype``. No cotangent."""
    batch, heads, headdim, dstate, groups, family = shape
    rng = np.random.default_rng(seed)
    lead = (batch, headdim) if family == 1 else (batch, heads, headdim)
    per_head = (heads, 1)
    arrays = {
        "state": rng.normal(size=(*lead, dstate)),
        "x": rng.normal(size=lead),
        "z": rng.normal(size=lead),
        "B": rng.normal(size=(batch, dstate) if family == 1 else (batch, groups, dstate)),
        "C": rng.normal(size=(batch, dstate) if family == 1 else (batch, groups, dstate)),
        "dt": rng.normal(size=lead) if family == 1 else rng.normal(size=(batch, heads, 1)),
        "A": -np.tile(np.arange(1, dstate + 1), (headdim, 1)) if family == 1 else -rng.uniform(1, 16, (heads, 1, 1)),
        "D": rng.normal(size=headdim if family == 1 else per_head),
        "dt_bias": _dt_bias(rng, headdim) if family == 1 else _dt_bias(rng, heads).reshape(per_head),
    }
    dtypes = dict.fromkeys(arrays, "float32") | dict.fromkeys(("x", "z", "B", "C", "dt"), dtype)
    return _rounded(arrays, dtypes), dtypes, None


def state_update_costs(shape, dtype: str) -> dict:
    """Bytes: the float32 state read and written (what dominates), x, z and out, B and C, A where it is a (dim, N)
    tile. FLOPs: about 7 a state element (decay, update, read-out). Exps: one a state element (Mamba-1's exp(dt A))
    or one a head dim (Mamba-2's)."""
    batch, heads, headdim, dstate, groups, family = shape
    item = jnp.dtype(dtype).itemsize
    elements = batch * heads * headdim * dstate
    a_bytes = headdim * dstate * 4 if family == 1 else heads * 4
    inputs = 3 * batch * heads * headdim * item + 2 * batch * groups * dstate * item + a_bytes
    return {
        "forward": {
            "bytes": 2 * elements * 4 + inputs,
            "flops": 7 * elements,
            "exps": elements if family == 1 else batch * heads * headdim,
        }
    }


def state_update_jax(variant: Variant, arrays, dtypes, cotangent, shape) -> JaxCalls:
    """The step as a compiled decoding loop runs it (``decode_loop``); ``output`` is one step's."""
    run = functools.partial(selective_state_update, dt_softplus=True, impl=variant.impl, config=variant.config)
    args = {k: jnp.asarray(arrays[k], dtypes[k]) for k in STATE_UPDATE_ARGS}
    state = jnp.asarray(arrays["state"])
    output = np.asarray(jax.jit(run)(state, **args)[0].astype(jnp.float32))
    inputs = {k: jnp.asarray(v, dtypes[k]) for k, v in over_steps(arrays, STATE_UPDATE_STEP_INPUTS).items()}

    def step(step_inputs, carried):
        return run(carried, **(args | step_inputs))

    return JaxCalls(decode_loop(step, inputs, state), None, output, 0, DECODE_LOOP_STEPS)


def state_update_torch(ref, arrays, dtypes, cotangent, shape):
    from torch_reference.kernel_calls import selective_state_update_calls

    inputs = over_steps(arrays, STATE_UPDATE_STEP_INPUTS)
    return selective_state_update_calls(ref, arrays, dtypes, STATE_UPDATE_ARGS, inputs)


OPS = {
    "selective_scan": KernelOp(
        "selective_scan",
        ("batch", "L", "dim", "N", "G"),
        {"130m": (8, 2048, 1536, 16, 1), "1.4b": (4, 2048, 4096, 16, 1), "long": (1, 16384, 1536, 16, 1)},
        ScanConfig,
        selective_scan_inputs,
        selective_scan_costs,
        selective_scan_jax,
        selective_scan_torch,
    ),
    "ssd": KernelOp(
        "ssd",
        ("batch", "L", "H", "P", "N", "G", "chunk"),
        {
            "130m": (8, 2048, 24, 64, 128, 1, 256),
            "2.7b": (4, 2048, 80, 64, 128, 1, 256),
            "long": (1, 65536, 128, 64, 128, 1, 128),
        },
        SsdConfig,
        ssd_inputs,
        ssd_costs,
        ssd_jax,
        ssd_torch,
        ssd_shape_config,
        torch_extensions=False,
    ),
    "causal_conv1d": KernelOp(
        "causal_conv1d",
        ("batch", "L", "dim", "width"),
        {"130m": (8, 2048, 1536, 4), "1.4b": (4, 2048, 4096, 4), "long": (1, 16384, 1536, 4)},
        ConvConfig,
        conv_inputs,
        conv_costs,
        conv_jax,
        conv_torch,
    ),
    "rmsnorm_gated": KernelOp(
        "rmsnorm_gated",
        ("rows", "dim", "G"),
        {"780m": (16384, 3072, 1), "2.7b": (8192, 5120, 1), "g8": (16384, 4096, 8)},
        NormConfig,
        norm_inputs,
        norm_costs,
        norm_jax,
        norm_torch,
        torch_extensions=False,
    ),
    "mamba3": KernelOp(
        "mamba3",
        ("batch", "L", "H", "P", "N", "G", "S", "chunk"),
        {"130m": (8, 2048, 24, 64, 128, 1, 32, 64), "long": (1, 65536, 24, 64, 128, 1, 32, 64)},
        None,
        mamba3_inputs,
        mamba3_costs,
        mamba3_jax,
        mamba3_torch,
        torch_extensions=False,
    ),
    "selective_state_update": KernelOp(
        "selective_state_update",
        ("batch", "H", "P", "N", "G", "family"),
        {
            "mamba1-130m-b1": (1, 1, 1536, 16, 1, 1),
            "mamba1-130m-b64": (64, 1, 1536, 16, 1, 1),
            "mamba2-780m-b1": (1, 48, 64, 128, 1, 2),
            "mamba2-780m-b64": (64, 48, 64, 128, 1, 2),
        },
        StateUpdateConfig,
        state_update_inputs,
        state_update_costs,
        state_update_jax,
        state_update_torch,
        torch_extensions=False,
        impls=("pallas", "reference"),
    ),
    "mamba3_step": KernelOp(
        "mamba3_step",
        ("batch", "H", "P", "N", "G", "S"),
        {
            "130m-b1": (1, 24, 64, 128, 1, 32),
            "130m-b64": (64, 24, 64, 128, 1, 32),
            "780m-b16": (16, 48, 64, 128, 1, 32),
        },
        None,
        mamba3_step_inputs,
        mamba3_step_costs,
        mamba3_step_jax,
        mamba3_step_torch,
        torch_extensions=False,
        impls=("pallas", "reference"),
    ),
}
