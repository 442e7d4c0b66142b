"""How the PyTorch reference executes a step: eagerly, as one replayed CUDA graph, or through torch.compile.

A fair comparison gives the reference its fastest execution. At the sizes we quote an eager PyTorch step is bound
by the host (Python and kernel launches), so the modes are:

- ``eager``: the step as written (fused AdamW, the reference's fused kernels).
- ``cuda_graph``: the whole step (forward, backward, clipping, fused AdamW; or the inference forward) captured in a
  CUDA graph after warm-up steps on a side stream, then replayed; each batch is copied into the captured input
  buffers first, and the learning rate is a device tensor the schedule fills between replays (capturable AdamW).
  Needs a GPU, one process, and batches given as tuples of tensors; a graph is captured per batch shape (Graph-Mamba:
  one per bucket of our padded batches), all in one memory pool.
- ``compile``: the model through ``torch.compile`` (graph breaks allowed around the reference's custom kernels).
- ``compile_cuda_graph``: ``torch.compile(mode="reduce-overhead")``: compiled regions replayed as CUDA graphs.

torch is imported where it is used, so that drivers (``compare.throughput``) read ``MODES`` without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MODES = {
    "eager": "eager (no CUDA graphs, no torch.compile)",
    "cuda_graph": "whole step as a CUDA graph (one per batch shape)",
    "compile": "torch.compile",
    "compile_cuda_graph": "torch.compile reduce-overhead (CUDA graphs)",
}
GRAPH_MODES = ("cuda_graph", "compile_cuda_graph")
CAPTURE_WARMUP_STEPS = 3  # eager steps on a side stream before capture: autotuning, cuDNN benchmarks, allocations


def check_mode(mode: str, device: str, parallel: str = "none") -> None:
    """Refuse a mode this process cannot run, naming the argument and what it needs, before any work."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if mode in GRAPH_MODES and device != "cuda":
        raise ValueError(f"mode {mode!r} replays CUDA graphs: it needs device 'cuda', got {device!r}")
    if mode == "cuda_graph" and parallel != "none":
        raise ValueError(f"mode 'cuda_graph' captures one process's step: parallel must be 'none', got {parallel!r}")


def compiled(model: torch.nn.Module, mode: str) -> Callable:
    """The model as ``mode`` runs it: itself, or through torch.compile (default or reduce-overhead)."""
    import torch

    if mode == "compile":
        return torch.compile(model)
    if mode == "compile_cuda_graph":
        return torch.compile(model, mode="reduce-overhead")
    return model


def _static_tensors(inputs) -> list[torch.Tensor]:
    import torch

    items = list(inputs) if isinstance(inputs, Sequence) else [inputs]
    other = next((type(t).__name__ for t in items if not isinstance(t, torch.Tensor)), None)
    if other is not None:
        raise ValueError(
            f"mode 'cuda_graph' needs batches as a tuple of tensors; got one holding {other} (a runner built for mode "
            "'cuda_graph' gives them so)"
        )
    return items


def _capture(body: Callable[[], object], warmup: int, between: Callable[[], None] | None = None, pool=None):
    """(CUDA graph, its outputs) of ``body()`` captured after ``warmup`` calls on a side stream (autotuning, cuDNN
    benchmarks and allocations happen there); ``between`` runs after each warm-up call and before the capture;
    ``pool``: a memory pool to share with graphs captured before (replayed one at a time)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            body()
            if between is not None:
                between()
    torch.cuda.current_stream().wait_stream(side)
    if between is not None and not warmup:
        between()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = body()
    return graph, out


def replayed(fn: Callable[[], object], warmup: int = CAPTURE_WARMUP_STEPS) -> Callable[[], object]:
    """``fn`` (no arguments, inputs it holds) captured once in a CUDA graph: a callable that replays it and returns
    the captured outputs (overwritten by the next replay). For timing a kernel without its launch overhead."""
    graph, out = _capture(fn, warmup)

    def replay():
        graph.replay()
        return out

    return replay


def _training_state(runner) -> dict[tuple, torch.Tensor]:
    """Every tensor a training step writes but the gradients, by a stable key: the model's parameters and buffers
    (BatchNorm statistics), then the optimizer's state (moments, step counts; created by its first step)."""
    import torch

    state = {("model", name): t for name, t in runner.model.state_dict(keep_vars=True).items()}
    for index, param in enumerate(p for group in runner.optimizer.param_groups for p in group["params"]):
        for key, t in runner.optimizer.state.get(param, {}).items():
            if isinstance(t, torch.Tensor):
                state[("optimizer", index, key)] = t
    return state


def _snapshot(runner) -> dict[tuple, torch.Tensor]:
    """A host copy of ``_training_state``, for undoing the capture's warm-up steps."""
    return {key: t.detach().to("cpu", copy=True) for key, t in _training_state(runner).items()}


def _restore(runner, snapshot: dict[tuple, torch.Tensor]) -> None:
    """Put the training state back as ``snapshot`` held it, in place (a graph records addresses): optimizer state the
    warm-up created is zeroed, as AdamW's first step finds it."""
    import torch

    with torch.no_grad():
        for key, t in _training_state(runner).items():
            if key in snapshot:
                t.copy_(snapshot[key])
            else:
                t.zero_()


class CapturedStep:
    """A runner's training step (or inference forward) captured in a CUDA graph the first time a batch of its shapes
    comes, and replayed for every batch of those shapes after it. ``runner`` is a ``train_bench`` runner built for
    mode ``cuda_graph`` (capturable AdamW with a device-tensor learning rate, autocast without its weight cache).
    The warm-up steps before each capture are undone (weights, buffers and optimizer state restored), so a captured
    run trains on the same trajectory as an eager one."""

    def __init__(self, runner, inference: bool = False, warmup: int = CAPTURE_WARMUP_STEPS):
        self.runner, self.inference, self.warmup = runner, inference, warmup
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, list[torch.Tensor], torch.Tensor]] = {}

    def _capture(self, inputs: list[torch.Tensor]) -> tuple:
        import torch

        static = [t.clone() for t in inputs]

        def body() -> torch.Tensor:
            if self.inference:
                return self.runner.infer_step(static)
            loss = self.runner.backward(static)
            self.runner.update()
            return loss

        pool = next(iter(self.graphs.values()))[0].pool() if self.graphs else None
        if self.inference:
            graph, out = _capture(body, self.warmup, None, pool)
            return graph, static, out
        saved = _snapshot(self.runner)
        warmed = 0

        def between() -> None:
            # zero_grad(set_to_none) before the capture too: the graph allocates the gradients it writes
            nonlocal warmed
            self.runner.optimizer.zero_grad(set_to_none=True)
            warmed += 1
            if warmed == self.warmup:
                torch.cuda.synchronize()
                _restore(self.runner, saved)

        graph, out = _capture(body, self.warmup, between, pool)
        return graph, static, out

    def __call__(self, inputs) -> torch.Tensor:
        tensors = _static_tensors(inputs)
        shapes = tuple((tuple(t.shape), t.dtype) for t in tensors)
        if shapes not in self.graphs:
            self.graphs[shapes] = self._capture(tensors)
        else:
            for static, new in zip(self.graphs[shapes][1], tensors, strict=True):
                static.copy_(new, non_blocking=True)
        graph, _, out = self.graphs[shapes]
        graph.replay()
        if not self.inference:
            self.runner.scheduler.step()
        return out


def step_function(runner, mode: str, inference: bool = False) -> Callable:
    """What one timed step calls for ``mode``: inputs -> the loss (training) or the logits (``inference``)."""
    if mode == "cuda_graph":
        return CapturedStep(runner, inference)
    step = runner.infer_step if inference else runner.train_step
    if mode != "compile_cuda_graph":
        return step
    import torch

    def marked(inputs):
        torch.compiler.cudagraph_mark_step_begin()  # the previous step's graph outputs may be overwritten now
        return step(inputs)

    return marked
