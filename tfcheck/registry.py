"""The public path ``tfcheck.registry``: the registry lives in ``tfcheck.engine.registry`` and the loaded battery
in ``tfcheck.battery``; their public names are re-exported here so code written against this path keeps
working."""
from tfcheck.battery import all_checks, get  # noqa: F401
from tfcheck.engine.registry import ALL_KINDS, Check, check, registered  # noqa: F401

__all__ = ["ALL_KINDS", "Check", "all_checks", "check", "get", "registered"]
