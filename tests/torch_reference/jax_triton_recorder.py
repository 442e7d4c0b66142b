"""Every jax-triton launch of mamba-ssm's SSD kernels from JAX (``torch_reference.ssd_jax_triton.forward`` /
``_backward``), recorded on the CPU without running (jax-triton imports only where JAX has a GPU): a stand-in
``jax_triton`` module returns zeros."""

import sys
import types
from typing import NamedTuple

H100_SMS = 132  # the backward sizes its head splits by the GPU's SM count; both recorders are given this one


class Launch(NamedTuple):
    name: str
    kernel: object  # the generated (autotuned) wrapper
    values: list  # its runtime arguments in order, then the output shapes
    constants: dict
    zeroed: tuple[str, ...]  # outputs jax-triton zeroes before the launch

    def by_name(self) -> dict:
        """{parameter name: value} for runtime arguments, outputs and constants."""
        return {**dict(zip(self.kernel.fn.arg_names, self.values, strict=False)), **self.constants}


def _stand_in(monkeypatch) -> list[Launch]:
    import jax.numpy as jnp

    launches = []

    def triton_call(*args, kernel, out_shape, grid, name, zeroed_outputs=(), **constants):
        outputs = kernel.fn.arg_names[len(args) : len(args) + len(out_shape)]
        launches.append(Launch(name, kernel, [*args, *out_shape], constants, tuple(outputs[i] for i in zeroed_outputs)))
        return [jnp.zeros(s.shape, s.dtype) for s in out_shape]

    monkeypatch.setitem(sys.modules, "jax_triton", types.SimpleNamespace(triton_call=triton_call))
    from torch_reference.ssd_jax_triton import backward as ssd_jax_triton_backward

    monkeypatch.setattr(ssd_jax_triton_backward, "sm_count", lambda: H100_SMS)
    return launches


def record_jax_launches(monkeypatch, arrays: dict, chunk: int) -> list[Launch]:
    """The forward's launches for ``arrays`` (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx as JAX arrays
    or None), dt_softplus and no dt limit."""
    from torch_reference.ssd_jax_triton.forward import forward

    launches = _stand_in(monkeypatch)
    a = arrays
    forward(
        a["x"], a["dt"], a["A"], a["B"], a["C"], chunk, a.get("D"), a.get("z"), a.get("dt_bias"),
        a.get("initial_states"), a.get("seq_idx"), True, (0.0, float("inf")),
    )  # fmt: skip
    return launches


def record_jax_backward_launches(monkeypatch, arrays: dict, chunk: int) -> list[Launch]:
    """The backward's launches for ``arrays`` as ``record_jax_launches`` plus dout (and dfinal_states or None)."""
    from torch_reference.ssd_jax_triton.backward import backward

    launches = _stand_in(monkeypatch)
    a = arrays
    backward(
        a["dout"], a.get("dfinal_states"), a["x"], a["dt"], a["A"], a["B"], a["C"], a["x"], chunk, a.get("D"),
        a.get("z"), a.get("dt_bias"), a.get("initial_states"), a.get("seq_idx"), True, (0.0, float("inf")),
    )  # fmt: skip
    return launches
