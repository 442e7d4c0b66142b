"""Language models to generate with: from a training run's folder (our checkpoints) or a mamba-ssm checkpoint folder
(config.json + model.safetensors or pytorch_model.bin, converted by ``jax_mamba.checkpoints.convert``)."""

from dataclasses import dataclass
from pathlib import Path

from flax import nnx

from jax_mamba.checkpoints import run_dir as runs
from jax_mamba.checkpoints.store import CheckpointStore
from jax_mamba.configs.loader import load_config
from jax_mamba.configs.schema import ModelConfig
from jax_mamba.data.tokenizer import Tokenizer, load_tokenizer
from jax_mamba.models import MambaLMHeadModel, ParamLayout

TEXT_DATA_KINDS = ("stdlib", "text", "tokens")  # the data kinds whose models write text (not the synthetic tasks)


class LoadError(ValueError):
    """A folder that holds no model to generate with, with the path and what was expected."""


@dataclass
class LoadedModel:
    model: MambaLMHeadModel
    tokenizer: Tokenizer
    source: str  # where the weights came from, for messages


def _model_with(cfg: ModelConfig, params: dict) -> MambaLMHeadModel:
    layout, template, state = ParamLayout.split(MambaLMHeadModel(cfg, rngs=nnx.Rngs(0)))
    missing = sorted(set(template) - set(params))
    if missing:
        raise LoadError(f"the weights lack {len(missing)} parameters of the model, e.g. {missing[:3]}")
    return layout.merge({k: params[k] for k in template}, state)


def load_run(run_dir: str | Path, step: int | None = None, tokenizer: str | None = None) -> LoadedModel:
    """The model of a ``jax_mamba.train`` run folder at checkpoint ``step`` (default: its latest), with the run's
    tokenizer (``data.tokenizer``; bytes when it has none) unless ``tokenizer`` names another."""
    folder = Path(run_dir)
    config_file = folder / runs.CONFIG_FILE
    if not config_file.is_file() or not runs.has_checkpoints(folder):
        raise LoadError(f"{folder} is not a training run folder with checkpoints (expected config.yaml, checkpoints/)")
    cfg = load_config(str(config_file))
    if cfg.family != "lm":
        raise LoadError(f"{folder} trained a {cfg.family!r} model; generation needs a language model (family 'lm')")
    if cfg.data.kind not in TEXT_DATA_KINDS:
        raise LoadError(f"{folder} trained on the synthetic task {cfg.data.kind!r}, not text: nothing to generate")
    store = CheckpointStore(folder / runs.CHECKPOINT_DIR, keep=1_000_000)  # keep: never prune what we only read
    steps = store.steps()
    step = max(steps) if step is None else step
    if step not in steps:
        raise LoadError(f"{folder} has no checkpoint of step {step}; it has {sorted(steps)}")
    model = MambaLMHeadModel(cfg.model, rngs=nnx.Rngs(0))
    layout, params, state = ParamLayout.split(model)
    params = store.restore_params(step, params)
    store.close()
    return LoadedModel(
        layout.merge(params, state), load_tokenizer(tokenizer or cfg.data.tokenizer), f"{folder} step {step}"
    )


def load_mamba_ssm_folder(folder: str | Path, tokenizer: str | None, a_activation: str | None = None) -> LoadedModel:
    """A mamba-ssm checkpoint folder (e.g. state-spaces/mamba-130m, downloaded); its tokenizer (GPT-NeoX's for the
    published ones) is not in the folder: ``tokenizer`` names a tokenizer.json, or the folder holds one.
    ``a_activation``: a Mamba-3 model's A activation where its config.json does not say it."""
    from jax_mamba.checkpoints.convert import load_pretrained  # the conversion table lives with the PyTorch side

    path = Path(folder)
    tokenizer = tokenizer or (str(path / "tokenizer.json") if (path / "tokenizer.json").is_file() else None)
    if tokenizer is None:
        raise LoadError(f"{path} holds no tokenizer.json; pass --tokenizer PATH (GPT-NeoX's for state-spaces models)")
    try:
        cfg, params = load_pretrained(path, a_activation)
    except ValueError as err:  # ConversionError: the folder's config or weights do not fit
        raise LoadError(f"{path}: {err}") from None
    return LoadedModel(_model_with(cfg, params), load_tokenizer(tokenizer), str(path))
