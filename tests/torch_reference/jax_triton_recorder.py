"""Every jax-triton launch ``torch_reference.ssd_jax_triton.ssd_forward`` makes, recorded on the CPU without
running (jax-triton imports only where JAX has a GPU): a stand-in ``jax_triton`` module returns zeros."""

import sys
import types
from typing import NamedTuple


class Launch(NamedTuple):
    name: str
    kernel: object  # the generated (autotuned) wrapper
    values: list  # its runtime arguments in order, then the output shapes
    constants: dict

    def by_name(self) -> dict:
        """{parameter name: value} for runtime arguments, outputs and constants."""
        return {**dict(zip(self.kernel.fn.arg_names, self.values, strict=False)), **self.constants}


def record_jax_launches(monkeypatch, arrays: dict, chunk: int) -> list[Launch]:
    """``ssd_forward``'s launches for ``arrays`` (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx as JAX
    arrays or None), dt_softplus and no dt limit."""
    import jax.numpy as jnp

    launches = []

    def triton_call(*args, kernel, out_shape, grid, name, **constants):
        launches.append(Launch(name, kernel, [*args, *out_shape], constants))
        return [jnp.zeros(s.shape, s.dtype) for s in out_shape]

    monkeypatch.setitem(sys.modules, "jax_triton", types.SimpleNamespace(triton_call=triton_call))
    from torch_reference import ssd_jax_triton

    monkeypatch.setattr(ssd_jax_triton, "load", lambda *_: None)
    a = arrays
    ssd_jax_triton.ssd_forward(
        a["x"], a["dt"], a["A"], a["B"], a["C"], chunk, a.get("D"), a.get("z"), a.get("dt_bias"),
        a.get("initial_states"), a.get("seq_idx"), True, (0.0, float("inf")),
    )  # fmt: skip
    return launches
