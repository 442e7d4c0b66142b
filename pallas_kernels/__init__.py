"""Pallas GPU kernels for the Mamba SSM cores, each beside its pure-JAX reference.

One folder per op (`api.py`: public function, argument checks and the ``impl=`` switch; `reference.py`: the
pure-JAX ground truth). This package knows nothing of Flax or torch.
"""

import sys

from pallas_kernels.causal_conv1d.api import causal_conv1d_fn
from pallas_kernels.mamba3.api import mamba3_mimo, mamba3_mimo_step, mamba3_siso_combined, mamba3_siso_step
from pallas_kernels.matmul_few_rows.api import matmul_few_rows
from pallas_kernels.rmsnorm_gated.api import rmsnorm_fn
from pallas_kernels.selective_scan.api import selective_scan_fn
from pallas_kernels.selective_state_update.api import selective_state_update
from pallas_kernels.ssd.api import mamba_chunk_scan_combined

__all__ = [
    "available_impls",
    "causal_conv1d_fn",
    "mamba3_mimo",
    "mamba3_mimo_step",
    "mamba3_siso_combined",
    "mamba3_siso_step",
    "mamba_chunk_scan_combined",
    "matmul_few_rows",
    "rmsnorm_fn",
    "selective_scan_fn",
    "selective_state_update",
]


def available_impls(op) -> tuple[str, ...]:
    """The ``impl=`` values an op's public function runs today, e.g. ``available_impls(selective_scan_fn)``."""
    fn = getattr(op, "func", op)  # functools.partial of an op
    return sys.modules[fn.__module__]._AVAILABLE_IMPLS
