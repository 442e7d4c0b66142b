"""Do both frameworks compute the same thing: models and ops against the PyTorch reference, within stated tolerances.

``python -m compare.parity`` checks a config's model and ops against the reference (``check``), each family's
PyTorch side in ``families``; ``tolerances`` holds every bound, ``mamba3_jax_peer`` checks our Mamba-3 against
mamba3-jax."""
