"""Text generation with the language models: prefill, a compiled decoding loop, sampling, and the command line
``python -m jax_mamba.generate``."""

from jax_mamba.generate.decode import Generation, generate
from jax_mamba.generate.sampling import SamplingConfig, sample_tokens

__all__ = ["Generation", "SamplingConfig", "generate", "sample_tokens"]
