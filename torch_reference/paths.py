"""Where the PyTorch side keeps things: the build cache (unpacked sdists and compiled CUDA extensions)."""

import os
from pathlib import Path

MAMBA_SSM_VERSION = "2.3.2.post1"
CAUSAL_CONV1D_VERSION = "1.7.0"
SDISTS = {"mamba_ssm": f"mamba_ssm-{MAMBA_SSM_VERSION}", "causal_conv1d": f"causal_conv1d-{CAUSAL_CONV1D_VERSION}"}


def cache_dir() -> Path:
    """``$JAX_MAMBA_TORCH_CACHE`` or ``~/.cache/jax-mamba/torch``."""
    return Path(os.environ.get("JAX_MAMBA_TORCH_CACHE", "~/.cache/jax-mamba/torch")).expanduser()


def source_dir(package: str) -> Path:
    """The unpacked sdist of ``package`` ("mamba_ssm" or "causal_conv1d") inside the cache."""
    return cache_dir() / "src" / SDISTS[package]


def build_dir(torch_version: str, cuda_version: str, arch: str) -> Path:
    """One folder per (torch, CUDA, GPU architecture): a build is reused only where it can load."""
    return cache_dir() / "build" / f"torch{torch_version}-cu{cuda_version}-sm{arch}"
