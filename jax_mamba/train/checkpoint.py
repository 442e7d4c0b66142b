"""Checkpoints with orbax: {params, opt_state} plus JSON metadata per step, the last ``keep`` kept.

Saves are synchronous (a checkpoint is complete on disk when ``save`` returns; orbax writes to a temporary folder and
renames it, so an interrupted save never replaces a finished one)."""

from pathlib import Path

import jax
import orbax.checkpoint as ocp


class CheckpointStore:
    def __init__(self, directory: Path, keep: int):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, params: dict, opt_state, meta: dict) -> None:
        state = {"params": params, "opt_state": opt_state}
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        self._manager.save(step, args=args, force=True)
        self._manager.wait_until_finished()

    def restore(self, step: int, params_like: dict, opt_state_like) -> tuple[dict, object, dict]:
        """(params, opt_state, meta) of ``step``, shaped like the given templates (arrays or shape structs)."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, {"params": params_like, "opt_state": opt_state_like})
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore())
        restored = self._manager.restore(step, args=args)
        return restored.state["params"], restored.state["opt_state"], dict(restored.meta)

    def close(self) -> None:
        self._manager.close()
