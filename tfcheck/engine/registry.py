"""The registry of checks. A check is a small function ``fn(ctx) -> list[Finding]`` registered with an id
(``family.name``), a title, the kinds of model it applies to and the troubleshooting rows it reports.

A check says what it decided with the verdict helpers below (``passed``, ``failed``, ``warned``,
``inconclusive``, ``not_applicable``) and why it does not apply with ``NotApplicable``: values, so nothing
reads a status back out of a message.

Adding a check: a new module in its family's folder ``tfcheck/checks/<family>/`` with one ``@check(...)``
function, and its rows in ``tfcheck/data/table/<family>.toml``; ``tfcheck/checks/__init__.py`` finds it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ALL_KINDS = frozenset({"encoder", "decoder", "seq2seq", "attention", None})
#: The groups a check belongs to, with what sets them apart. The pytest plugin registers a marker
#: ``tfcheck_<group>`` for each before any check is imported (``-m "not tfcheck_training"``), so a new group is
#: added here first.
GROUPS = {
    "probe": "checks that look at forwards of the model",
    "training": "checks that take optimiser steps on a copy of the model (the slow ones)",
}


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    kinds: frozenset
    rows: tuple[str, ...]
    func: Callable
    doc: str
    order: int = 100
    #: "probe" checks look at forwards; "training" checks take optimiser steps on a copy, with a budget
    #: of their own (the train_steps declaration), reported apart from the probe battery's cost.
    group: str = "probe"
    #: ``applies(subject) -> None`` when the check applies, else ``NotApplicable(reason)`` (e.g. "forward
    #: takes no cache argument"); a check that does not apply is no item and no finding, only a line
    #: among the report's assumptions. Read from facts settled without a forward: collection decides the
    #: pytest items from it.
    applies: Callable[[Any], NotApplicable | None] | None = None
    #: the check builds its own probe inputs (perturbed tokens, padding), which a declared ``inputs``
    #: factory does not allow
    builds_inputs: bool = False
    #: the check's minimal-example property (a ``tfcheck.tools.shrinking.Property``), for checks whose
    #: failures the search shrinks to the smallest input that shows them; ``replay`` finds it here
    shrink: Any = None
    #: the check reads a change between eval-mode forwards as a dependence (a leak, a sample seeing another):
    #: it runs with the random ops of eval mode neutralised, and is inconclusive when they cannot be
    #: (``tfcheck.probe.deterministic``). By default the checks of the flow, mask and attention families.
    flow: bool = False

    def applies_to(self, kind: str | None) -> bool:
        return kind in self.kinds

    def not_applicable(self, subject: Any) -> NotApplicable | None:
        """Why the check does not apply to this subject, or None when it does."""
        if not self.applies_to(subject.kind):
            return NotApplicable(f"not for kind {subject.kind or 'unknown'}")
        if self.builds_inputs and subject.facts.inputs is not None:
            return NotApplicable("it builds its own probe inputs (perturbed or padded tokens), and this model's "
                                 "inputs come from the declared 'inputs' factory")
        if self.applies is None:
            return None
        why = self.applies(subject)
        # A plain string is taken as the reason: checks written before NotApplicable existed return one.
        return NotApplicable(why) if isinstance(why, str) else why


# ----- verdicts -------------------------------------------------------------------------------------------
# A check says what it decided with these, never by writing a status word into a message that other code reads
# back: a reason is a value (NotApplicable, Inconclusive), and its text prefix exists only in the rendering.

@dataclass(frozen=True)
class NotApplicable:
    """The check does not apply to this model, and why (the reason alone, no prefix)."""

    reason: str
    PREFIX: ClassVar[str] = "not applicable"

    def __str__(self) -> str:
        return f"{self.PREFIX}: {self.reason}"

    def finding(self, check_id: str, location: Location | None = None,
                evidence: dict[str, Any] | None = None) -> Finding:
        return Finding(check_id, Status.SKIP, str(self), location, evidence or {})


@dataclass(frozen=True)
class Inconclusive:
    """The check ran but its measurement cannot decide (the positive control did not move, nothing to
    measure was found), and why."""

    reason: str
    PREFIX: ClassVar[str] = "inconclusive"

    def __str__(self) -> str:
        return f"{self.PREFIX}: {self.reason}"

    def finding(self, check_id: str, location: Location | None = None,
                evidence: dict[str, Any] | None = None) -> Finding:
        return Finding(check_id, Status.SKIP, str(self), location, evidence or {})


def passed(check_id: str, message: str, location: Location | None = None,
           evidence: dict[str, Any] | None = None) -> Finding:
    return Finding(check_id, Status.PASS, message, location, evidence or {})


def failed(check_id: str, message: str, location: Location | None = None, evidence: dict[str, Any] | None = None,
           row: str | None = None) -> Finding:
    return Finding(check_id, Status.FAIL, message, location, evidence or {}, row)


def warned(check_id: str, message: str, location: Location | None = None, evidence: dict[str, Any] | None = None,
           row: str | None = None) -> Finding:
    return Finding(check_id, Status.WARN, message, location, evidence or {}, row)


def inconclusive(check_id: str, reason: str, location: Location | None = None,
                 evidence: dict[str, Any] | None = None) -> Finding:
    """A skipped finding whose message reads "inconclusive: <reason>"."""
    return Inconclusive(reason).finding(check_id, location, evidence)


def not_applicable(check_id: str, reason: str, location: Location | None = None,
                   evidence: dict[str, Any] | None = None) -> Finding:
    """A skipped finding whose message reads "not applicable: <reason>" (for a check that finds out only while
    measuring; one that knows beforehand says so with ``applies``)."""
    return NotApplicable(reason).finding(check_id, location, evidence)


_REGISTRY: dict[str, Check] = {}


#: The families (folders of ``tfcheck/checks/``) whose checks compare eval-mode forwards: ``flow`` by default.
FLOW_FAMILIES = frozenset({"flow", "mask", "attention"})


def check(id: str, title: str, rows: tuple[str, ...], kinds: Any = ALL_KINDS, order: int = 100,
          group: str = "probe", applies: Callable[[Any], NotApplicable | None] | None = None,
          builds_inputs: bool = False, shrink: Any = None, flow: bool | None = None) -> Callable:
    """Register a check function under ``id``. The battery runs in ``order`` (forward.smoke is 0, cheap
    shape checks come early), then by id. ``flow`` defaults to whether the check's module lies in one of the
    ``FLOW_FAMILIES`` folders."""
    if group not in GROUPS:
        raise ValueError(f"check {id!r}: group {group!r} is not one of {', '.join(GROUPS)}; add it to "
                         "tfcheck.engine.registry.GROUPS")

    def register(func: Callable) -> Callable:
        if id in _REGISTRY:
            raise ValueError(f"check id {id!r} registered twice ({_REGISTRY[id].func.__module__} and "
                             f"{func.__module__})")
        compares_forwards = family_of(func) in FLOW_FAMILIES if flow is None else flow
        _REGISTRY[id] = Check(id, title, frozenset(kinds), tuple(rows), func, (func.__doc__ or "").strip(), order,
                              group, applies, builds_inputs, shrink=shrink, flow=compares_forwards)
        return func
    return register


def family_of(func: Callable) -> str | None:
    """The family folder of a check function's module (``tfcheck.checks.<family>.<module>``), if it has one."""
    parts = (getattr(func, "__module__", None) or "").split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["tfcheck", "checks"] else None


def registered() -> list[Check]:
    """The checks registered so far, in battery order. The registry imports no check (each check imports the
    registry to register itself); ``tfcheck.battery`` loads them all."""
    return sorted(_REGISTRY.values(), key=lambda c: (c.order, c.id))


def battery() -> list[Check]:
    """The battery the engine runs, in battery order: the checks a front end loaded (``tfcheck.battery.all_checks``,
    called by the API, the command line and the pytest plugin). The engine sits below the checks, so it never
    loads them itself; it refuses to run none."""
    checks = registered()
    if not checks:
        raise RuntimeError("no tfcheck check is registered: load the battery first (tfcheck.battery.all_checks(), "
                           "which tfcheck.run_checks, the command line and the pytest plugin call)")
    return checks
