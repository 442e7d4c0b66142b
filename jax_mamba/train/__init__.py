"""Training: ``python -m jax_mamba.train --config NAME [--key=value ...]`` (see ``cli``)."""
