"""What a model family brings to the shared training loop, parity and benchmark drivers: a ``Task`` (model factory,
data, loss and metrics, which parameters take weight decay). ``task_for(cfg)`` picks it by ``cfg.family``."""

from jax_mamba.tasks.base import Task
from jax_mamba.tasks.graph import GraphPrediction
from jax_mamba.tasks.image_classification import ImageClassification
from jax_mamba.tasks.language_model import LanguageModeling

_TASKS = {"lm": LanguageModeling, "mamba_vision": ImageClassification, "graph_mamba": GraphPrediction}


def task_for(cfg) -> Task:
    """The task of a ``RunConfig`` (by its ``family``)."""
    return _TASKS[cfg.family](cfg)


__all__ = ["GraphPrediction", "ImageClassification", "LanguageModeling", "Task", "task_for"]
