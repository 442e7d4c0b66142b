"""Depthwise causal 1-D convolution: ``causal_conv1d_fn`` with causal-conv1d's semantics."""
