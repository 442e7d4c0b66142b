"""Parameters as a flat ``{"backbone.layers.0.mixer.in_proj.kernel": array}`` dict (torch state-dict style names),
the form the optimizer, checkpoints and weight conversion use; ``ParamLayout`` maps it to and from the NNX model."""

from dataclasses import dataclass

import jax
from flax import nnx


def _key_name(entry) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    raise TypeError(f"unexpected pytree path entry {entry!r}")


@dataclass(frozen=True)
class ParamLayout:
    """What it takes to rebuild a model from flat params: the NNX graph, the state's tree structure, the names."""

    graphdef: nnx.GraphDef
    treedef: jax.tree_util.PyTreeDef
    names: tuple[str, ...]

    @classmethod
    def split(cls, model: nnx.Module) -> tuple["ParamLayout", dict[str, jax.Array]]:
        """(layout, flat params) of a model holding only ``nnx.Param`` state."""
        graphdef, state = nnx.split(model)
        leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
        names = []
        for path, _ in leaves_with_paths:
            parts = [_key_name(p) for p in path]
            if parts[-1] == "value":  # a Variable's payload
                parts = parts[:-1]
            names.append(".".join(parts))
        non_params = [n for n, (_, v) in zip(names, nnx.to_flat_state(state), strict=True) if type(v) is not nnx.Param]
        if non_params:
            raise ValueError(f"model holds state other than nnx.Param: {non_params[:5]}")
        layout = cls(graphdef, treedef, tuple(names))
        return layout, dict(zip(names, (leaf for _, leaf in leaves_with_paths), strict=True))

    def merge(self, params: dict[str, jax.Array]) -> nnx.Module:
        """A model whose parameters are ``params`` (any dict with exactly these names); works under jit."""
        missing = [n for n in self.names if n not in params]
        extra = [n for n in params if n not in set(self.names)]
        if missing or extra:
            raise KeyError(f"params do not fit the model: missing {missing[:5]}, unexpected {extra[:5]}")
        state = jax.tree_util.tree_unflatten(self.treedef, [params[n] for n in self.names])
        return nnx.merge(self.graphdef, state)
