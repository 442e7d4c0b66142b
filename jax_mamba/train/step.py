"""The jit-compiled train and eval steps over flat parameter dicts (see ``models.params``)."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jax_mamba.models.params import ParamLayout


def loss_terms(layout: ParamLayout, params: dict, batch: dict) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """(summed token NLL, (scored tokens, correct argmax predictions)) over the positions where mask is 1.

    Logits are upcast to float32 before the softmax, whatever the compute dtype."""
    logits = layout.merge(params)(batch["inputs"]).astype(jnp.float32)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
    mask = batch["mask"]
    correct = (jnp.argmax(logits, axis=-1) == batch["targets"]).astype(jnp.float32)
    return jnp.sum(nll * mask), (jnp.sum(mask), jnp.sum(correct * mask))


def make_train_step(layout: ParamLayout, tx: optax.GradientTransformation, accum: int) -> tuple[Callable, list[int]]:
    """Returns (step, traces): ``step(params, opt_state, batch) -> (params, opt_state, metrics)`` with batch arrays
    (accum, batch, L), params and opt_state donated; ``traces`` counts how often it was traced (1 after the first
    call means no retracing). Gradients are averaged over all scored tokens of all micro-batches."""
    traces = [0]
    grad_fn = jax.value_and_grad(lambda p, b: loss_terms(layout, p, b), has_aux=True)

    def step(params, opt_state, batch):
        traces[0] += 1

        def micro(carry, micro_batch):
            (loss_sum, (count, correct)), grads = grad_fn(params, micro_batch)
            acc_grads, acc_loss, acc_count, acc_correct = carry
            acc_grads = jax.tree.map(jnp.add, acc_grads, grads)
            return (acc_grads, acc_loss + loss_sum, acc_count + count, acc_correct + correct), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        init = (zeros, jnp.float32(0), jnp.float32(0), jnp.float32(0))
        if accum == 1:
            carry, _ = micro(init, jax.tree.map(lambda x: x[0], batch))
        else:
            carry, _ = jax.lax.scan(micro, init, batch)
        grads, loss_sum, count, correct = carry
        count = jnp.maximum(count, 1.0)
        grads = jax.tree.map(lambda g: g / count, grads)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics = {"loss": loss_sum / count, "accuracy": correct / count, "grad_norm": optax.tree.norm(grads)}
        return params, opt_state, metrics

    return jax.jit(step, donate_argnums=(0, 1)), traces


def make_eval_step(layout: ParamLayout) -> Callable:
    """``eval_step(params, batch) -> (loss_sum, count, correct)`` for one (batch, L) batch."""

    def evaluate(params, batch):
        loss_sum, (count, correct) = loss_terms(layout, params, batch)
        return loss_sum, count, correct

    return jax.jit(evaluate)
