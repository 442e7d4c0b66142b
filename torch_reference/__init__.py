"""The PyTorch side: the mamba-ssm adapter (CPU fallback and CUDA builds), PyTorch ports of MambaVision and
Graph-Mamba on mamba-ssm ops, and weight conversion to and from the Flax models. The only package that imports torch
or mamba_ssm."""
