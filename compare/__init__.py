"""The comparison harness: drives the JAX models (jax_mamba) and, through torch_reference, PyTorch mamba-ssm on the
same configs for parity and performance, and writes benchmark reports under benchmarks/."""
