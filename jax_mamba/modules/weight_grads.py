"""Weight gradients computed as soon as their layer's backward runs (``mesh.grad_reduce="early"``).

A weight's gradient x^T dy is used only by the optimizer, so XLA's scheduler is free to compute it, and to start the
all-reduce that data parallelism puts after it, at the very end of the backward, where no compute is left to hide
the all-reduce behind (seen on 2 GPUs: every gradient all-reduce after the last layer's backward; benchmarks/README.md,
multi-GPU scaling). Inside ``early_weight_grads()`` each ``Linear`` passes its input and weight through
``tie_weight_grad``, an identity whose backward joins the two gradients in one optimization barrier: the input's
gradient, which the layers before need, is released only once the weight's is computed."""

import contextlib
import contextvars
from collections.abc import Iterator

import jax

_EARLY = contextvars.ContextVar("early_weight_grads", default=False)


@contextlib.contextmanager
def early_weight_grads() -> Iterator[None]:
    """Within it (at trace time), ``tie_weight_grad`` ties a weight's gradient to its input's. Enter it inside the
    function being traced: JAX's trace caches do not key on it, so a function traced before keeps its first form."""
    token = _EARLY.set(True)
    try:
        yield
    finally:
        _EARLY.reset(token)


def tie_weight_grad(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(x, w) unchanged; inside ``early_weight_grads()`` their gradients leave the backward together."""
    return _tied(x, w) if _EARLY.get() else (x, w)


@jax.custom_vjp
def _tied(x, w):
    return x, w


def _tied_fwd(x, w):
    return (x, w), None


def _tied_bwd(_, grads):
    return tuple(jax.lax.optimization_barrier(grads))


_tied.defvjp(_tied_fwd, _tied_bwd)
