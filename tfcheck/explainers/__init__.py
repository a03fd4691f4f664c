"""Explainers: what an error or a failure means, where it happened, its minimal example, traces."""
