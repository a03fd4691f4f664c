"""The statuses a finding can have, and what each means everywhere (report, CLI, pytest)."""
from __future__ import annotations

import enum
from collections.abc import Iterable


class Status(enum.StrEnum):
    """Outcome of one finding. Ordered from best to worst by ``severity``."""

    PASS = "pass"
    #: a failure the user accepted with a reason (``accept`` declaration)
    ACCEPTED = "accepted"
    #: not applicable, or inconclusive; always carries the reason
    SKIP = "skip"
    #: suspicious, but legitimate designs exist that look the same
    WARN = "warn"
    FAIL = "fail"
    #: tfcheck itself broke; please report it
    ERROR = "error"

    def __str__(self) -> str:
        return self.value

    @property
    def severity(self) -> int:
        return _ORDER.index(self)


_ORDER = [Status.PASS, Status.ACCEPTED, Status.SKIP, Status.WARN, Status.FAIL, Status.ERROR]


def worst(statuses: Iterable[Status]) -> Status:
    """The worst of several statuses; PASS for none."""
    return max(statuses, key=lambda s: s.severity, default=Status.PASS)
