"""Mamba-1 selective scan: ``selective_scan_fn`` with mamba-ssm's semantics."""
