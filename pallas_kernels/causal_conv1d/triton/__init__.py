"""The causal conv1d's Pallas kernels on the Triton backend (the default; ``causal_conv1d.dispatch`` chooses)."""
