"""Mamba-2 chunked state-space duality: ``mamba_chunk_scan_combined`` with mamba-ssm's semantics."""
