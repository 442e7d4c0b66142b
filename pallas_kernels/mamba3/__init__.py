"""Mamba-3's SISO core (mamba-ssm's ``mamba3_siso_combined`` and ``mamba3_siso_step``): the pure-JAX reference."""
