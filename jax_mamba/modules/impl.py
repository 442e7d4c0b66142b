"""Model-level choice of kernels (``ModelConfig.impl``) mapped to each op's ``impl=``, and of the compute dtype.

- ``"reference"``: every op runs its pure-JAX reference.
- ``"pallas"``: ops that have a Pallas kernel run it (interpreted when JAX has no GPU, which is slow: for tests);
  the others run their reference.
- ``"auto"`` (default): ``"pallas"`` on a GPU, ``"reference"`` elsewhere.
- ``"mamba_ssm_triton"``: the SSD runs mamba-ssm's own Triton kernels launched from JAX (registered by
  ``import torch_reference.ssd_jax_triton``; GPU only), every other op as ``"pallas"``: a Mamba-2 step whose SSD
  kernels are the PyTorch reference's, for comparisons that separate the kernels from the framework.
"""

import jax
import jax.numpy as jnp

from jax_mamba.configs.schema import MODEL_IMPLS
from pallas_kernels import available_impls, mamba_chunk_scan_combined
from pallas_kernels.ssd.api import MAMBA_SSM_TRITON

_SWAPPED_OPS = {MAMBA_SSM_TRITON: mamba_chunk_scan_combined}  # model impl -> the one op it runs from outside


def _wants_kernels(model_impl: str) -> bool:
    """Whether ``model_impl`` asks for the fast kernels: "pallas", or "auto" on a GPU."""
    if model_impl not in MODEL_IMPLS:
        raise ValueError(f"impl must be one of {MODEL_IMPLS}, got {model_impl!r}")
    return model_impl in ("pallas", *_SWAPPED_OPS) or (model_impl == "auto" and jax.default_backend() == "gpu")


def op_impl(model_impl: str, op) -> str:
    """The ``impl=`` to call ``op`` (a pallas_kernels public function) with under ``model_impl``."""
    if getattr(op, "func", op) is _SWAPPED_OPS.get(model_impl):
        return model_impl  # the op itself says what to import if nothing registered it
    return "pallas" if _wants_kernels(model_impl) and "pallas" in available_impls(op) else "reference"


def compute_dtype_for(cfg):
    """The matmul dtype of a model config (any family's: it reads ``cfg.compute_dtype``): bfloat16 on GPU and
    float32 on CPU for "auto"; otherwise the named dtype."""
    if cfg.compute_dtype == "auto":
        return jnp.bfloat16 if jax.default_backend() == "gpu" else jnp.float32
    return jnp.dtype(cfg.compute_dtype)


def attention_impl(model_impl: str, dtype, head_dim: int) -> str:
    """``implementation=`` for ``jax.nn.dot_product_attention``: ``"cudnn"`` (cuDNN's fused flash attention: no
    (N, N) score matrix in memory) where the model may use GPU kernels (``impl`` "pallas" or "auto"), JAX runs on a
    GPU and cuDNN takes the inputs (bfloat16/float16, head_dim a multiple of 8 up to 128); ``"xla"`` otherwise."""
    fused = (
        _wants_kernels(model_impl)
        and jax.default_backend() == "gpu"  # "pallas" off a GPU interprets Pallas kernels; cuDNN has no such mode
        and jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
        and head_dim % 8 == 0
        and head_dim <= 128
    )
    return "cudnn" if fused else "xla"
