"""Model-level choice of kernels (``ModelConfig.impl``) mapped to each op's ``impl=``.

- ``"reference"``: every op runs its pure-JAX reference.
- ``"pallas"``: ops that have a Pallas kernel run it (interpreted when JAX has no GPU, which is slow: for tests);
  the others run their reference.
- ``"auto"`` (default): ``"pallas"`` on a GPU, ``"reference"`` elsewhere.
"""

import jax

from jax_mamba.configs.schema import MODEL_IMPLS
from pallas_kernels import available_impls


def op_impl(model_impl: str, op) -> str:
    """The ``impl=`` to call ``op`` (a pallas_kernels public function) with under ``model_impl``."""
    if model_impl not in MODEL_IMPLS:
        raise ValueError(f"impl must be one of {MODEL_IMPLS}, got {model_impl!r}")
    wants_pallas = model_impl == "pallas" or (model_impl == "auto" and jax.default_backend() == "gpu")
    return "pallas" if wants_pallas and "pallas" in available_impls(op) else "reference"
