"""Flax NNX Mamba-family models (Mamba-1/Mamba-2 language models and hybrids), configs, data and training.

The SSM cores call ``pallas_kernels`` through each op's ``impl=`` switch.
"""
