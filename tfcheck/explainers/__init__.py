"""Explainers: what an error from the model means, where it happened and which troubleshooting row it is.

Below the engine, which turns every exception a check meets into an explained finding.
"""
