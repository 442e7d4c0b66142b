"""Checkpoints with orbax: {params, opt_state, model_state} plus JSON metadata per step, the last ``keep`` kept.
``model_state`` (BatchNorm running statistics) is stored only where the model has some, so the language models'
checkpoints hold {params, opt_state} as before.

Saves are synchronous (a checkpoint is complete on disk when ``save`` returns; orbax writes to a temporary folder and
renames it, so an interrupted save never replaces a finished one)."""

import time
from pathlib import Path

import jax
import orbax.checkpoint as ocp

from jax_mamba.processes import is_leader, wait_for_all


class CheckpointStore:
    def __init__(self, directory: Path, keep: int):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    @staticmethod
    def _tree(params: dict, opt_state, model_state: dict) -> dict:
        tree = {"params": params, "opt_state": opt_state}
        return {**tree, "model_state": model_state} if model_state else tree

    def save(self, step: int, params: dict, opt_state, model_state: dict, meta: dict) -> None:
        state = self._tree(params, opt_state, model_state)
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        self._manager.save(step, args=args, force=True)
        self._manager.wait_until_finished()

    def restore(self, step: int, params_like: dict, opt_state_like, model_state_like: dict) -> tuple:
        """(params, opt_state, model_state, meta) of ``step``, shaped like the templates (arrays or shape structs)."""
        tree = self._tree(params_like, opt_state_like, model_state_like)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore())
        restored = self._manager.restore(step, args=args)
        state = restored.state
        return state["params"], state["opt_state"], state.get("model_state", {}), dict(restored.meta)

    def restore_params(self, step: int, params_like: dict) -> dict:
        """Only the params of ``step`` (inference: no optimizer state is read or built), shaped like the template."""
        abstract = {"params": jax.tree.map(ocp.utils.to_shape_dtype_struct, params_like)}
        with ocp.PyTreeCheckpointer() as reader:
            restored = reader.restore(
                self.directory / str(step) / "state",
                args=ocp.args.PyTreeRestore(
                    abstract, ocp.checkpoint_utils.construct_restore_args(abstract), partial_restore=True
                ),
            )
        return restored["params"]

    def set_aside(self, step: int) -> Path:
        """Move the folder of ``step`` (unreadable) out of the store's view, to ``damaged-<step>-<time>`` beside the
        steps, so that a resumed run can save that step again; nothing is deleted. Returns the new path. In a
        multi-process run the first process moves it and the others wait for that."""
        target = self.directory / f"damaged-{step}-{time.strftime('%Y%m%d-%H%M%S')}"
        if is_leader():
            (self.directory / str(step)).rename(target)
        wait_for_all(f"checkpoint {step} set aside")
        self._manager.reload()
        return target

    def close(self) -> None:
        self._manager.close()
