"""Attention checks: heads and the decoding cache."""
