"""The battery loader, for the front ends (the API, the command line, the pytest plugin, the public shims).
Importing ``tfcheck.checks`` imports each check module, which registers itself with ``tfcheck.engine.registry``;
this is the one place that does it. The engine sits below the checks and runs what is registered
(``registry.battery()``), so the front end that starts a run loads the battery first."""
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
