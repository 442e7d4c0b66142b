"""The mamba-ssm reference for tests: CPU fallback for the CPU suite, the CUDA build for ``gpu`` tests. mamba-ssm is
loaded once per process, so the two kinds run in separate pytest invocations (``-m gpu`` / ``-m "not gpu"``)."""

import pytest


def reference_for(device: str, require_extensions: bool = True):
    pytest.importorskip("torch", reason="the PyTorch side is not installed (make setup-torch)")
    from torch_reference.backend import load

    try:
        return load(device, require_extensions=require_extensions)
    except ImportError as err:
        pytest.skip(f"mamba-ssm is not importable: {err}")
    except RuntimeError as err:  # already loaded for the other device, or no CUDA build
        pytest.skip(str(err))
