"""The weights a new run starts from (``--init_from PATH``): read from a mamba-ssm checkpoint folder (language
models), an NVlabs MambaVision folder or ``.pth.tar`` file (MambaVision), or one of our run folders (any family; its
newest step, or the step folder ``RUN/checkpoints/N`` given), then fitted to the new run's model by name and shape.

Fitting is strict: every parameter and statistic of the new model must be found with its shape, and nothing may be
left over, except what ``--init_from_skip`` names (comma-separated ``fnmatch`` patterns over our parameter names, or
``head``: the task's output layer), which keeps its fresh initialization. Only weights move: the optimizer starts
fresh and the step counter at 0 (the training loop's job).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from jax_mamba.checkpoints.run_dir import CHECKPOINT_DIR, CONFIG_FILE
from jax_mamba.models.name_patterns import expand_patterns, matches_any


class InitFromError(ValueError):
    """``--init_from`` names nothing readable, or weights that do not fit the run's model (one line)."""


@dataclass
class StartingWeights:
    """Host arrays by our flat names: ``params`` and ``state`` (BatchNorm statistics) to load, and where they came
    from (``info``, written to run.json)."""

    params: dict[str, np.ndarray]
    state: dict[str, np.ndarray]
    info: dict = field(default_factory=dict)


def read_weights(path: str | Path, family: str, model=None) -> StartingWeights:
    """Every weight ``path`` holds, for a run of ``family`` ("lm", "mamba_vision" or "graph_mamba"); ``model``: the
    run's model config, the architecture of an NVlabs ``.pth.tar`` that names none of the published ones."""
    path = Path(path).expanduser().absolute()
    weights = _read(path, family, model)
    weights.info = {"path": str(path), **weights.info}
    return weights


def _read(path: Path, family: str, model) -> StartingWeights:
    if not path.exists():
        raise InitFromError(f"--init_from={path}: no such file or folder")
    if _is_run_folder(path) or _is_step_folder(path):
        return _read_run(path)
    if family == "lm" and (path / "config.json").is_file():
        from jax_mamba.checkpoints.convert import load_pretrained

        _, params = _converted(path, load_pretrained, a_activation=_a_activation(model))
        return StartingWeights(params, {}, {"kind": "mamba-ssm"})
    if family == "mamba_vision" and ((path / "config.json").is_file() or path.is_file()):
        from jax_mamba.checkpoints.convert_mamba_vision import load_pretrained

        _, params, state = _converted(path, load_pretrained, config=model)
        return StartingWeights(params, state, {"kind": "nvlabs"})
    published = {
        "lm": "a mamba-ssm checkpoint folder (config.json + weights), ",
        "mamba_vision": "an NVlabs MambaVision folder or .pth.tar file, ",
    }.get(family, "")
    raise InitFromError(
        f"--init_from={path}: expected {published}a run folder (with {CHECKPOINT_DIR}/) or one of its step folders"
    )


def fit_weights(
    weights: StartingWeights,
    params_like: Mapping,
    state_like: Mapping,
    skip: str = "",
    head_patterns: Sequence[str] = (),
) -> StartingWeights:
    """``weights`` reduced to the arrays of the new model (``params_like``/``state_like``: our names to arrays or
    shape structs) that ``skip`` does not name, cast to the model's dtypes; ``info["skipped"]`` lists the names left
    at their fresh initialization. Raises InitFromError naming what is missing, left over or of another shape."""
    patterns = expand_patterns(skip, head_patterns)
    skipped = sorted(n for n in (*params_like, *state_like) if matches_any(n, patterns))
    source = weights.info.get("path", "the source")
    fitted = {}
    for kind, have, want in (("params", weights.params, params_like), ("state", weights.state, state_like)):
        wanted = {n: like for n, like in want.items() if n not in skipped}
        missing = sorted(set(wanted) - set(have))
        extra = sorted(n for n in set(have) - set(want) if not matches_any(n, patterns))
        wrong = [n for n in sorted(wanted) if n in have and tuple(np.shape(have[n])) != tuple(wanted[n].shape)]
        shapes = [f"{n} {tuple(np.shape(have[n]))} there, {tuple(wanted[n].shape)} here" for n in wrong]
        problems = [f"{len(missing)} missing ({_names(missing)})"] if missing else []
        problems += [f"{len(extra)} not in this model ({_names(extra)})"] if extra else []
        problems += [f"{len(wrong)} of another shape ({_names(shapes)})"] if wrong else []
        if problems:
            raise InitFromError(
                f"--init_from: the {kind} of {source} do not fit this run's model: {'; '.join(problems)}. "
                "Pass --init_from_skip=PATTERN[,PATTERN] (or =head) to keep those at their fresh initialization"
            )
        fitted[kind] = {n: np.asarray(have[n], dtype=np.dtype(wanted[n].dtype)) for n in wanted}
    return StartingWeights(fitted["params"], fitted["state"], {**weights.info, "skipped": skipped})


def _a_activation(model) -> str | None:
    """The run's Mamba-3 A activation (the weights of a folder that does not say its own are taken as trained with
    it; a folder that says another is refused), None for other models."""
    ssm = getattr(model, "ssm_cfg", None)
    return ssm.A_activation if ssm is not None and ssm.layer == "Mamba3" else None


def _names(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _converted(path: Path, load_pretrained, **kwargs):
    try:
        return load_pretrained(path, **kwargs)
    except (FileNotFoundError, KeyError, ValueError) as err:  # ConversionError is a ValueError
        raise InitFromError(f"--init_from={path}: {err}") from None


def _is_run_folder(path: Path) -> bool:
    return path.is_dir() and (path / CHECKPOINT_DIR).is_dir() and (path / CONFIG_FILE).is_file()


def _is_step_folder(path: Path) -> bool:
    return path.is_dir() and path.name.isdigit() and path.parent.name == CHECKPOINT_DIR and (path / "state").is_dir()


def _read_run(path: Path) -> StartingWeights:
    """The params and model state of a run's newest step (or of the step folder given), without its optimizer
    state, shaped as saved."""
    import jax
    import orbax.checkpoint as ocp

    if _is_step_folder(path):
        step_dir = path
    else:
        steps = sorted(int(p.name) for p in (path / CHECKPOINT_DIR).iterdir() if p.name.isdigit())
        if not steps:
            raise InitFromError(f"--init_from={path}: the run has no saved step in {path / CHECKPOINT_DIR}")
        step_dir = path / CHECKPOINT_DIR / str(steps[-1])
    with ocp.PyTreeCheckpointer() as reader:
        saved = reader.metadata(step_dir / "state").item_metadata.tree
        wanted = {k: saved[k] for k in ("params", "model_state") if k in saved}
        abstract = jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), wanted)
        restore = ocp.args.PyTreeRestore(
            abstract, ocp.checkpoint_utils.construct_restore_args(abstract), partial_restore=True
        )
        restored = reader.restore(step_dir / "state", args=restore)
    host = jax.tree.map(np.asarray, restored)
    info = {"kind": "run", "step": int(step_dir.name)}
    return StartingWeights(dict(host["params"]), dict(host.get("model_state", {})), info)
