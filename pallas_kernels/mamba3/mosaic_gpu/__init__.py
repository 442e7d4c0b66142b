"""Mamba-3's SISO scan on the SSD's Mosaic GPU kernels, with Mamba-3's own per-position decays."""
