"""The jit-compiled train and eval steps over flat variable dicts (see ``models.params``), for any ``Task``.

A step takes the parameters, the optimizer state and the model state (BatchNorm running statistics; empty for the
language models) and returns all three updated. Randomness in training (drop path, dropout) comes from
``fold_in(key(seed), step, micro-batch)``: a pure function of the step, so a resumed run draws the same."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jax_mamba.checkpoints.init_from import StartingWeights
from jax_mamba.configs.schema import RunConfig
from jax_mamba.models.params import ParamLayout
from jax_mamba.modules.weight_grads import early_weight_grads
from jax_mamba.tasks import Task
from jax_mamba.train.optim import make_optimizer, schedule_constants, traced_schedule
from jax_mamba.train.sharding import gather_split_params, tree_shardings


def training_key(seed: int, step: jax.Array, micro: jax.Array) -> jax.Array:
    """The random key of one micro-batch's dropout and drop path: a function of (seed, step, micro-batch)."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), step), micro)


def make_grad_fn(task: Task, layout: ParamLayout, gather_shardings=None) -> Callable:
    """``grad_fn(params, state, micro_batch, key) -> ((loss_sum, (sums, state)), grads)``: the training loss summed
    over the micro-batch's scored items and its gradient with respect to ``params`` (float32 parameters; the model
    runs in its compute dtype), model in training mode with dropout keys from ``key``. With ``gather_shardings`` the
    model runs on the parameters gathered whole (``sharding.gather_split_params``)."""

    def loss_fn(params, state, micro_batch, key):
        params = layout.cast_for_compute(params)  # before any gather: FSDP moves the compute dtype's bytes
        model = layout.merge(
            params if gather_shardings is None else gather_split_params(params, gather_shardings), state
        )
        model.train()
        loss_sum, sums = task.loss_terms(model, micro_batch, train=True, rngs=nnx.Rngs(dropout=key))
        return loss_sum, (sums, layout.state_of(model))

    return jax.value_and_grad(loss_fn, has_aux=True)


class LearningRateConstants(NamedTuple):
    """The schedule's constants (``optim.schedule_constants``) and ``make_tx(schedule) -> optax transformation``: the
    run's optimizer with that learning-rate schedule."""

    values: np.ndarray
    make_tx: Callable[[optax.Schedule], optax.GradientTransformation]


class BoundStep:
    """A jitted train step with its learning-rate constants bound: called, lowered and compiled as
    ``step(params, opt_state, state, batch, step_index)`` (``step.lower(...).compile()(...)`` too)."""

    def __init__(self, jitted: Callable, constants: np.ndarray):
        self.jitted, self.constants = jitted, constants

    def __call__(self, *args):
        return self.jitted(*args, self.constants)

    def lower(self, *args) -> "_Bound":
        return _Bound(self.jitted.lower(*args, self.constants), self.constants)


class _Bound:
    """A lowered or compiled stage of a ``BoundStep`` (``jax.stages``): calls pass the bound constants, ``compile``
    keeps them bound, everything else (``as_text``, ``memory_analysis``, ...) is the stage's own."""

    def __init__(self, stage, constants: np.ndarray):
        self.stage, self.constants = stage, constants

    def compile(self, *args, **kwargs) -> "_Bound":
        return _Bound(self.stage.compile(*args, **kwargs), self.constants)

    def __call__(self, *args):
        return self.stage(*args, self.constants)

    def __getattr__(self, name: str):
        return getattr(self.stage, name)


def make_train_step(
    task: Task,
    layout: ParamLayout,
    tx: optax.GradientTransformation,
    accum: int,
    seed: int = 0,
    shardings: tuple | None = None,
    gather_params: bool = False,
    reduce_axis: str | None = None,
    lr_constants: LearningRateConstants | None = None,
) -> tuple[Callable, list[int]]:
    """Returns (step, traces): ``step(params, opt_state, state, batch, step_index) -> (params, opt_state, state,
    metrics)`` with batch arrays (accum, batch, ...), params, opt_state and state donated; ``traces`` counts how often
    it was traced (1 after the first call means no retracing). Gradients are averaged over all scored items of all
    micro-batches; the model state passes through the micro-batches in order. With ``lr_constants`` the metrics
    include ``lr``, the rate this step's update used: computed on the device with the step, so that logging it
    runs no eager JAX operation between steps (the first such call compiles, which stalled the loop for 0.6 s).
    ``shardings``: (params, opt_state, state) shardings the step's results keep (a mesh's; see ``train.sharding``);
    with ``gather_params`` the model runs on the parameters gathered whole (``sharding.gather_split_params``).
    ``reduce_axis`` (``mesh.grad_reduce="early"``, data-parallel meshes): each device computes the gradients of its
    own rows under ``shard_map`` over that axis, weight gradients tied to their layer's backward
    (``modules.weight_grads``), and they are summed over the devices explicitly, the matmul weights' in the compute
    dtype as XLA's own reduction does; the update then runs as usual on the summed gradients.
    ``lr_constants``: the learning rate's schedule constants become an argument of the compiled step, which builds
    its optimizer from them (``LearningRateConstants``; ``tx`` then only for its state's structure), so that
    trainings differing only in lr, warm-up or max_steps share one compiled program; the returned step binds them."""
    traces = [0]
    if gather_params and shardings is None:
        raise ValueError("make_train_step: gather_params needs the parameters' shardings")
    grad_fn = make_grad_fn(task, layout, shardings[0] if gather_params else None)

    def accumulate(params, state, batch, step_index, device=None):
        """Gradient, loss and metric sums over the micro-batches of ``batch`` (accum, rows, ...), gradients summed in
        float32 at least. ``device``: this device's index, folded into the random keys (per-device gradients)."""

        def micro(carry, inputs):
            micro_batch, index = inputs
            acc_grads, acc_loss, acc_sums, model_state = carry
            key = training_key(seed, step_index, index)
            key = key if device is None else jax.random.fold_in(key, device)
            (loss_sum, (sums, model_state)), grads = grad_fn(params, model_state, micro_batch, key)
            acc_grads = jax.tree.map(jnp.add, acc_grads, grads)
            acc_sums = {k: acc_sums[k] + sums[k] for k in sums} if acc_sums else sums
            return (acc_grads, acc_loss + loss_sum, acc_sums, model_state), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.promote_types(p.dtype, jnp.float32)), params)
        if accum == 1:
            carry, _ = micro((zeros, jnp.float32(0), {}, state), (jax.tree.map(lambda x: x[0], batch), 0))
            return carry
        # Every micro-batch runs inside the scan, so the model's backward is traced and compiled once; the sums of
        # metrics start from zeros of the shapes one micro-batch gives.
        first = jax.tree.map(lambda x: x[0], batch)
        (_, (sums, _)), _ = jax.eval_shape(grad_fn, params, state, first, training_key(seed, step_index, 0))
        no_sums = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), sums)
        carry, _ = jax.lax.scan(micro, (zeros, jnp.float32(0), no_sums, state), (batch, jnp.arange(accum)))
        return carry

    def reduced_over_devices(params, state, batch, step_index):
        """``accumulate`` on each device's rows, then summed over ``reduce_axis`` (inside ``shard_map``)."""
        compute = layout.cast_for_compute(params)  # gradients of the cast weights come out in the compute dtype

        def local(compute, state, batch, step_index):
            with early_weight_grads():
                grads, loss_sum, sums, state = accumulate(
                    compute, state, batch, step_index, jax.lax.axis_index(reduce_axis)
                )
            grads = {k: jax.lax.psum(g.astype(compute[k].dtype), reduce_axis) for k, g in grads.items()}
            state = {
                k: jax.lax.pmean(v, reduce_axis) if jnp.issubdtype(v.dtype, jnp.floating) else v
                for k, v in state.items()
            }
            return grads, jax.lax.psum(loss_sum, reduce_axis), jax.lax.psum(sums, reduce_axis), state

        rows = P(None, reduce_axis)  # batch arrays are (accum, rows, ...)
        per_device = jax.shard_map(local, in_specs=(P(), P(), rows, P()), out_specs=P(), check_vma=False)
        grads, loss_sum, sums, state = per_device(compute, state, batch, step_index)
        return {k: g.astype(params[k].dtype) for k, g in grads.items()}, loss_sum, sums, state

    def step(params, opt_state, state, batch, step_index, constants=None):
        traces[0] += 1
        schedule = None if constants is None else traced_schedule(constants)
        update = tx if constants is None else lr_constants.make_tx(schedule)
        if reduce_axis is None:
            grads, loss_sum, sums, state = accumulate(params, state, batch, step_index)
        else:
            grads, loss_sum, sums, state = reduced_over_devices(params, state, batch, step_index)
        count = jnp.maximum(sums["count"], 1.0)
        grads = jax.tree.map(lambda g: g / count, grads)
        with jax.named_scope("optimizer"):  # profiles attribute the update's kernels by this scope
            updates, opt_state = update.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
        metrics = {"loss": loss_sum / count, "grad_norm": optax.tree.norm(grads), **task.train_metrics(sums)}
        if schedule is not None:
            metrics["lr"] = schedule(step_index)
        return params, opt_state, state, metrics

    out_shardings = None if shardings is None else (*shardings, None)
    compiled = jax.jit(step, donate_argnums=(0, 1, 2), out_shardings=out_shardings)
    if lr_constants is None:
        return compiled, traces
    return BoundStep(compiled, lr_constants.values), traces


def make_eval_step(task: Task, layout: ParamLayout) -> Callable:
    """``eval_step(params, state, batch) -> (loss_sum, sums)`` for one batch (leading axis batch), model in eval
    mode (running statistics, no dropout)."""

    def evaluate(params, state, batch):
        model = layout.merge(params, state)
        model.eval()
        return task.loss_terms(model, batch, train=False, rngs=None)

    return jax.jit(evaluate)


@dataclass
class Training:
    """What a run of ``cfg`` starts from: the model's layout, its initial params and state, the optimizer and its
    state, the jit train step and its trace counter (see ``make_train_step``)."""

    layout: ParamLayout
    params: dict
    state: dict
    tx: optax.GradientTransformation
    opt_state: optax.OptState
    train_step: Callable
    traces: list[int]


def variable_shapes(cfg: RunConfig, task: Task) -> tuple[dict, dict]:
    """(params, state) of ``cfg``'s model as shape structs by our flat names, without building it."""
    return jax.eval_shape(lambda: ParamLayout.split(task.build_model(nnx.Rngs(params=cfg.train.seed)))[1:])


def initial_variables(
    cfg: RunConfig,
    task: Task,
    mesh: Mesh | None = None,
    make_tx: Callable | None = None,
    starting: StartingWeights | None = None,
):
    """(layout, params, state, tx, opt_state) of a new run of ``cfg``: the model initialized by ``train.seed``, the
    arrays of ``starting`` (fitted to it: ``checkpoints.init_from``) in place of their fresh values, and, with
    ``make_tx(abstract params) -> optax transformation``, the optimizer and its state (else None for both).
    Built by one jit-compiled function whose results are placed FSDP-style on ``mesh`` (``train.sharding``) as they
    are made: no device ever holds the whole model and optimizer state (eager initialization under a mesh runs on
    every device: 30.2 GiB each at 2.7B parameters before being split, a 45.4 GiB peak where the step needs 36.4)."""
    captured = {}

    def model_variables():
        layout, params, state = ParamLayout.split(task.build_model(nnx.Rngs(params=cfg.train.seed)))
        captured["layout"] = layout
        return params, state

    params_shape, state_shape = jax.eval_shape(model_variables)  # the model traced once for shapes, once to build
    tx = None if make_tx is None else make_tx(params_shape)
    opt_shape = None if tx is None else jax.eval_shape(tx.init, params_shape)
    shardings = None if mesh is None else tree_shardings(mesh, (params_shape, state_shape, opt_shape))
    loaded = ({}, {}) if starting is None else (starting.params, starting.state)
    if shardings is not None:  # each device receives its own share of the loaded arrays only
        loaded = tuple(
            {n: jax.device_put(v, placement[n]) for n, v in arrays.items()}
            for arrays, placement in zip(loaded, shardings[:2], strict=True)
        )

    def build(loaded_params, loaded_state):
        params, state = model_variables()
        params, state = {**params, **loaded_params}, {**state, **loaded_state}
        return params, state, None if tx is None else tx.init(params)

    params, state, opt_state = jax.jit(build, out_shardings=shardings)(*loaded)
    return captured["layout"], params, state, tx, opt_state


def init_training(
    cfg: RunConfig, task: Task, mesh: Mesh | None = None, starting: StartingWeights | None = None
) -> Training:
    """The model, optimizer and train step of ``cfg`` as the training loop builds them (``initial_variables``, from
    ``starting`` weights where given; weight decay where the task's mask says). With a ``mesh``, parameters,
    optimizer state and model state are placed FSDP-style on it (``train.sharding``) and the step keeps them so."""
    t = cfg.train

    def make_tx(params):
        return make_optimizer(cfg.optim, t.max_steps, task.weight_decay_mask(params), task.head_patterns)

    layout, params, state, tx, opt_state = initial_variables(cfg, task, mesh, make_tx, starting)
    decay_mask = task.weight_decay_mask(params)  # once: the step may retrace after params are donated
    constants = LearningRateConstants(
        schedule_constants(cfg.optim, t.max_steps),
        lambda schedule: make_optimizer(cfg.optim, t.max_steps, decay_mask, task.head_patterns, schedule),
    )
    shardings = None if mesh is None else tuple(tree_shardings(mesh, tree) for tree in (params, opt_state, state))
    gather = mesh is not None and mesh.shape["fsdp"] > 1 and cfg.mesh.fsdp_gather == "gather"
    early = mesh is not None and mesh.shape["data"] > 1 and cfg.mesh.grad_reduce == "early"
    train_step, traces = make_train_step(
        task, layout, tx, t.grad_accum_steps, t.seed, shardings, gather, "data" if early else None, constants
    )
    return Training(layout, params, state, tx, opt_state, train_step, traces)
