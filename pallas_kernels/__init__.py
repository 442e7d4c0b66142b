"""Pallas GPU kernels for the Mamba SSM cores, each beside its pure-JAX reference.

One folder per op (`api.py`: public function, argument checks and the ``impl=`` switch; `reference.py`: the
pure-JAX ground truth). This package knows nothing of Flax or torch.
"""

from pallas_kernels.causal_conv1d.api import causal_conv1d_fn
from pallas_kernels.rmsnorm_gated.api import rmsnorm_fn
from pallas_kernels.selective_scan.api import selective_scan_fn
from pallas_kernels.ssd.api import mamba_chunk_scan_combined

__all__ = ["causal_conv1d_fn", "mamba_chunk_scan_combined", "rmsnorm_fn", "selective_scan_fn"]
