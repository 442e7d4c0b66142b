"""Gated RMSNorm: ``rmsnorm_fn`` with mamba-ssm's semantics (Mamba-2's output norm)."""
