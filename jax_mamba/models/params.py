"""Model variables as flat ``{"backbone.layers.0.mixer.in_proj.kernel": array}`` dicts (torch state-dict style names),
the form the optimizer, checkpoints and weight conversion use; ``ParamLayout`` maps them to and from the NNX model.

Two dicts: ``params`` (``nnx.Param``: what the optimizer trains) and ``state`` (``nnx.BatchStat``: what a forward
pass in training updates, e.g. BatchNorm running statistics; empty for the language models)."""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import nnx

from jax_mamba.modules.layers import Linear

_KINDS = {nnx.Param: "param", nnx.BatchStat: "state"}


def _key_name(entry) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    raise TypeError(f"unexpected pytree path entry {entry!r}")


def _flat_names(state) -> tuple[list[str], list, jax.tree_util.PyTreeDef]:
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
    names = []
    for path, _ in leaves_with_paths:
        parts = [_key_name(p) for p in path]
        if parts[-1] == "value":  # a Variable's payload
            parts = parts[:-1]
        names.append(".".join(parts))
    return names, [leaf for _, leaf in leaves_with_paths], treedef


@dataclass(frozen=True)
class ParamLayout:
    """What it takes to rebuild a model from flat dicts: the NNX graph, the state's tree structure, the names (in
    tree order) and which of them are state rather than parameters."""

    graphdef: nnx.GraphDef
    treedef: jax.tree_util.PyTreeDef
    names: tuple[str, ...]
    state_names: frozenset[str]
    # (name, dtype) of the parameters the model casts whole to a narrower compute dtype before using them: the
    # kernels of ``modules.layers.Linear`` (see ``cast_for_compute``)
    compute_casts: tuple[tuple[str, str], ...] = ()

    @classmethod
    def split(cls, model: nnx.Module) -> tuple["ParamLayout", dict[str, jax.Array], dict[str, jax.Array]]:
        """(layout, params, state) of a model holding ``nnx.Param`` and ``nnx.BatchStat`` variables only."""
        graphdef, state = nnx.split(model)
        names, leaves, treedef = _flat_names(state)
        kinds = [_KINDS.get(type(v)) for _, v in nnx.to_flat_state(state)]
        others = [n for n, kind in zip(names, kinds, strict=True) if kind is None]
        if others:
            raise ValueError(f"model holds state other than nnx.Param and nnx.BatchStat: {others[:5]}")
        state_names = frozenset(n for n, kind in zip(names, kinds, strict=True) if kind == "state")
        casts = tuple(
            (".".join(map(str, path)) + ".kernel", jnp.dtype(module.dtype).name)
            for path, module in nnx.iter_modules(model)
            if isinstance(module, Linear) and jnp.dtype(module.dtype).itemsize < 4
        )
        layout = cls(graphdef, treedef, tuple(names), state_names, casts)
        values = dict(zip(names, leaves, strict=True))
        params = {n: v for n, v in values.items() if n not in layout.state_names}
        return layout, params, {n: v for n, v in values.items() if n in layout.state_names}

    def merge(self, params: dict[str, jax.Array], state: dict[str, jax.Array] | None = None) -> nnx.Module:
        """A model whose variables are ``params`` and ``state`` (together exactly these names); works under jit."""
        values = {**params, **(state or {})}
        missing = [n for n in self.names if n not in values]
        extra = [n for n in values if n not in set(self.names)]
        if missing or extra:
            raise KeyError(f"variables do not fit the model: missing {missing[:5]}, unexpected {extra[:5]}")
        tree = jax.tree_util.tree_unflatten(self.treedef, [values[n] for n in self.names])
        return nnx.merge(self.graphdef, tree)

    def cast_for_compute(self, params: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """``params`` with ``compute_casts`` applied: the values the model computes with either way (its modules'
        own cast is then a no-op), cast before the model runs so that on an FSDP mesh the gathers of these weights,
        most of the parameters, move bf16 rather than float32, as mixed-precision FSDP does."""
        casts = dict(self.compute_casts)
        return {k: v.astype(casts[k]) if k in casts else v for k, v in params.items()}

    def state_of(self, model: nnx.Module) -> dict[str, jax.Array]:
        """The model's current state values (e.g. running statistics after a training forward), by name."""
        names, leaves, _ = _flat_names(nnx.split(model)[1])
        return {n: v for n, v in zip(names, leaves, strict=True) if n in self.state_names}
