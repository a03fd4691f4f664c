"""The public path ``tfcheck.registry``: the module lives in ``tfcheck.engine.registry``; its public names are
re-exported here so code and printed lines written against this path keep working."""
from tfcheck.engine.registry import (  # noqa: F401
    all_checks,
    ALL_KINDS,
    check,
    Check,
    get,
)

__all__ = ['all_checks', 'ALL_KINDS', 'check', 'Check', 'get']
