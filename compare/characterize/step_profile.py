"""Per-kernel device time of the training loop's own jit train step, for the profile commands
(``compare.characterize.graph_profile``, ``compare.characterize``).

The step is compiled once (its HLO text gives each fusion's op name scope, from ``jax.named_scope`` and JAX's
``transpose(jvp(...))`` for backward ops), run on the given batches to warm up, timed by wall clock, then run again
under ``jax.profiler.trace``; the trace's device events are summed per kernel and per step."""

import collections
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np

from compare.kernels.launches import kernel_totals, launches_per_call, per_call_us_by_op
from jax_mamba.train.step import Training

_HLO_OP = re.compile(r'^\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{[^}]*op_name="([^"]*)"')


def hlo_scopes(hlo_text: str) -> dict[str, str]:
    """Kernel name (an HLO instruction's name with '.' as '_', as the profiler reports it) -> its op_name scope."""
    scopes = {}
    for line in hlo_text.splitlines():
        match = _HLO_OP.match(line)
        if match:
            scopes.setdefault(match.group(1).replace(".", "_"), match.group(2))
    return scopes


@dataclass
class StepProfile:
    # (kernel, launching HLO instruction or "" where the trace does not say) -> us per step, largest first: library
    # GEMMs share kernel names across passes, their instructions do not
    launches_us: dict[tuple[str, str], float]
    scopes: dict[str, str]  # kernel or HLO instruction -> op name scope (Pallas kernels go by their own names)
    step_wall_ms: float  # wall time per step outside the profiler
    steps: int
    launches: dict[str, float] = field(default_factory=dict)  # kernel -> launches per step

    @property
    def kernel_us(self) -> dict[str, float]:
        """kernel -> us per step, largest first."""
        return kernel_totals(self.launches_us)

    @property
    def device_ms(self) -> float:
        return sum(self.launches_us.values()) / 1e3


def compile_step(setup: Training, batch) -> tuple:
    """(the compiled train step for ``batch``'s shapes, its kernels' op name scopes). Call the compiled step
    directly: jit's own cache would compile it a second time."""
    compiled = setup.train_step.lower(setup.params, setup.opt_state, setup.state, batch, np.int32(0)).compile()
    return compiled, hlo_scopes(compiled.as_text())


def common_shape_batches(batches: list, steps: int) -> list:
    """Up to ``steps`` of ``batches`` (dicts of arrays), those of the most common shapes, on the device: one compiled
    step runs them all (graph batches come in a few planned shapes)."""
    shape_of = lambda batch: tuple(sorted((k, v.shape) for k, v in batch.items()))  # noqa: E731
    common = collections.Counter(shape_of(b) for b in batches).most_common(1)[0][0]
    return [jax.device_put(b) for b in batches if shape_of(b) == common][:steps]


def profile_steps(setup: Training, batches: list, keep_trace: Path | None = None) -> StepProfile:
    """Profile ``setup``'s train step on ``batches`` (device arrays of one shape, each with the leading accum axis):
    one compilation, a warm-up pass, a timed pass and a traced pass over the batches. ``keep_trace``: where to copy
    the trace (XPlane protobuf)."""
    params, state, opt_state = setup.params, setup.state, setup.opt_state
    compiled, scopes = compile_step(setup, batches[0])
    index = 0

    def run_all():
        nonlocal params, opt_state, state, index
        out = None
        for batch in batches:
            params, opt_state, state, out = compiled(params, opt_state, state, batch, np.int32(index))
            index += 1
        jax.block_until_ready(out)

    run_all()
    began = time.perf_counter()  # outside the profiler, whose start and stop take a while
    run_all()
    wall = (time.perf_counter() - began) / len(batches)
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir):
            run_all()
        (path,) = sorted(Path(trace_dir).rglob("*.xplane.pb"))[-1:]
        profile = jax.profiler.ProfileData.from_file(str(path))
        if keep_trace is not None:
            shutil.copyfile(path, keep_trace)
    steps = len(batches)
    launches_us = per_call_us_by_op(profile, steps)
    return StepProfile(launches_us, scopes, wall * 1e3, steps, launches_per_call(profile, steps))


def warm_window(setup: Training, batches: list, window) -> None:
    """Compile and warm ``setup``'s train step on ``batches`` (two passes), then run one more step inside
    ``window`` (a context manager: a counter profiler's capture range), synchronized at both ends."""
    params, state, opt_state = setup.params, setup.state, setup.opt_state
    compiled, _ = compile_step(setup, batches[0])
    out = None
    for index, batch in enumerate([*batches, *batches]):
        params, opt_state, state, out = compiled(params, opt_state, state, batch, np.int32(index))
    jax.block_until_ready(out)
    with window():
        out = compiled(params, opt_state, state, batches[0], np.int32(2 * len(batches)))
        jax.block_until_ready(out)
