"""Flax NNX modules mirroring mamba-ssm's module boundaries (``mamba_simple.Mamba``, ``mamba2.Mamba2``,
``mha.MHA``, ``mlp.GatedMLP``, ``block.Block``), so weight conversion is a table of names.

Tensors are channels last: hidden states (batch, L, d_model). Parameters are float32; matmuls run in the module's
compute dtype; norms, SSM state and the residual stream stay float32.
"""
