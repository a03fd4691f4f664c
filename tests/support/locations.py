"""The location rule of issue 16, shared by the check tests and the gallery test: a finding that is a
problem (fail or warn) names a module and the user's file:line, or says why it cannot (``location.reason``)."""
from __future__ import annotations

from tfcheck.report.status import Status

PROBLEMS = (Status.FAIL, Status.WARN)


def unlocated(findings) -> list[str]:
    """The problems among ``findings`` that break the rule, each as 'check: message' for the assertion."""
    bad = []
    for f in findings:
        if f.status not in PROBLEMS:
            continue
        loc = f.location
        if loc is None or loc.module is None:
            bad.append(f"{f.check}: no module ({f.message[:100]})")
        elif not (loc.file and loc.line) and not loc.reason:
            bad.append(f"{f.check}: module {loc.module!r} but no file:line and no reason ({f.message[:100]})")
    return bad
