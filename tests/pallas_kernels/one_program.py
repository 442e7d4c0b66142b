"""Forward and backward of a function compiled as one XLA program, for the kernels' oracle tests.

``jax.vjp(jax.jit(f), ...)`` compiles the forward, then each piece of the backward on its own when the pullback runs
(about 30 compiles for an SSD case); one program holding both compiles about a quarter faster on the CPU suite's two
cores, where compiling is most of a kernel test's time. The kernels, their residuals and their cotangents are the
same either way."""

from collections.abc import Callable, Sequence

import jax


def forward_and_backward(fn: Callable, primals: Sequence, cotangents) -> tuple:
    """(fn(*primals), the gradients of ``primals`` for ``cotangents``, a pytree of fn's outputs' structure). Where
    the cotangents' shapes come from the outputs, ``jax.eval_shape(fn, *primals)`` gives them without a compile."""

    @jax.jit
    def both(primals, cotangents):
        outputs, vjp = jax.vjp(fn, *primals)
        return outputs, vjp(cotangents)

    return both(list(primals), cotangents)
