"""Parameter names picked by comma-separated ``fnmatch`` patterns, as ``--init_from_skip`` and the optimizer's
parameter groups (``optim.freeze`` / ``train_only`` / ``lr_scale``) take them; "head" stands for the task's output
layer (``Task.head_patterns``)."""

import fnmatch
from collections.abc import Sequence


def expand_patterns(text: str, head_patterns: Sequence[str] = ()) -> list[str]:
    """The patterns of a comma-separated ``text``, "head" replaced by ``head_patterns``."""
    patterns = [p.strip() for p in text.split(",") if p.strip()]
    return [q for p in patterns for q in (head_patterns if p == "head" else [p])]


def matches_any(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
