"""Mask checks: the causal mask and the padding mask."""
