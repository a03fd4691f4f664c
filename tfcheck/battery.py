"""The battery: every check, loaded. Importing ``tfcheck.checks`` imports each check module, which registers
itself with ``tfcheck.engine.registry``; this loader is the one place that does it, so that the registry
never imports a check and no check module sits in an import cycle."""
from __future__ import annotations

from tfcheck.engine.registry import Check, registered
from tfcheck.errors import UsageError


def all_checks() -> list[Check]:
    """Every check of the battery, in battery order (forward.smoke first, then by ``order`` and id)."""
    import tfcheck.checks  # noqa: F401  (registers the battery)

    return registered()


def get(check_id: str) -> Check:
    checks = {c.id: c for c in all_checks()}
    if check_id not in checks:
        raise UsageError(f"unknown check {check_id!r}; checks are: {', '.join(checks)} (see `tfcheck list`)")
    return checks[check_id]
