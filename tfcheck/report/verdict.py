"""The headline rule of a model's report, for the whole project (text report, pytest summary, JSON).

A check's results fall in one of these outcomes: passed, failed (a FAIL or tfcheck's own ERROR), warning,
accepted, blocked (it could not run because another check failed: evidence ``blocked_by`` names it), over budget
(stopped at its time budget) and inconclusive (it ran and could not decide, or found out only while measuring that
it does not apply). A model is headed by its worst decided outcome; inconclusive is never a plain PASS: a model
whose only non-passes are inconclusive is headed "PASS, 1 inconclusive: <check>: <reason>".
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tfcheck.report.findings import Finding
from tfcheck.report.status import Status, worst

#: ``blocked_by`` evidence of a check stopped at its time budget (tfcheck.engine.runner writes it).
OVER_BUDGET = "budget_s"

_SINGULAR = {"errors": "error", "warnings": "warning"}

#: Outcomes in the order a verdict line names them.
OUTCOMES = ("failed", "errors", "blocked", "over budget", "passed", "warnings", "inconclusive", "accepted")


def outcome(result: Any) -> str:
    """The outcome of one check result (tfcheck.report.report.CheckResult)."""
    status = result.status
    if status is Status.SKIP:
        blocker = next((f.evidence.get("blocked_by") for f in result.findings if f.evidence.get("blocked_by")), None)
        if blocker == OVER_BUDGET:
            return "over budget"
        return "blocked" if blocker else "inconclusive"
    return {Status.PASS: "passed", Status.FAIL: "failed", Status.ERROR: "errors", Status.WARN: "warnings",
            Status.ACCEPTED: "accepted"}[status]


@dataclass(frozen=True)
class Verdict:
    """A model's headline: its status, the count of each outcome, and the undecided checks with their reason."""

    status: Status
    counts: dict[str, int]
    undecided: tuple[tuple[str, str], ...]  # (check, reason) of the inconclusive and over-budget checks

    @property
    def headline(self) -> str:
        """``FAIL`` / ``WARN`` / ``PASS`` / ``PASS, 1 inconclusive: mask.padding: <reason>``."""
        text = self.status.value.upper()
        if self.counts["over budget"] and self.status is Status.FAIL and not self.counts["failed"]:
            check, why = next(u for u in self.undecided)
            return f"FAIL, {self.counts['over budget']} over budget (budget_overrun=fail): {check}: {why}"
        if self.status in (Status.PASS, Status.ACCEPTED) and self.undecided:
            kinds = [f"{self.counts[o]} {o}" for o in ("inconclusive", "over budget") if self.counts[o]]
            check, why = self.undecided[0]
            text += f", {' and '.join(kinds)}: {check}: {why}"
            if len(self.undecided) > 1:
                text += f" (and {len(self.undecided) - 1} more)"
        return text

    def counts_text(self) -> str:
        """``1 failed, 17 blocked, 0 warnings``: every outcome that occurred, warnings always."""
        parts = [f"{self.counts[o]} {_SINGULAR.get(o, o) if self.counts[o] == 1 else o}" for o in OUTCOMES
                 if self.counts[o] or o == "warnings"]
        return ", ".join(parts)

    def to_dict(self) -> dict[str, int]:
        return {o.replace(" ", "_"): self.counts[o] for o in OUTCOMES}


def verdict(results: list[Any], overrun_fails: bool = False) -> Verdict:
    """The headline of a model's check results. Decided outcomes rank as statuses do; a model with no decided
    result at all (every check inconclusive) is headed SKIP; a check stopped by its budget heads FAIL where
    ``overrun_fails`` (the model's budget_overrun=fail)."""
    counts = Counter({o: 0 for o in OUTCOMES})
    undecided = []
    for r in results:
        o = outcome(r)
        counts[o] += 1
        if o in ("inconclusive", "over budget"):
            undecided.append((r.check, reason(r.findings[0])))
    decided = [r.status for r in results if r.status is not Status.SKIP]
    status = worst(decided) if decided else (Status.SKIP if results else Status.PASS)
    if counts["blocked"] and status is Status.PASS:  # blocked by a check that is not in this report (``only``)
        status = Status.SKIP
    if overrun_fails and counts["over budget"]:
        status = worst([status, Status.FAIL])
    return Verdict(status, dict(counts), tuple(undecided))


def reason(finding: Finding) -> str:
    """A skipped finding's reason, without its "inconclusive: " prefix."""
    message = finding.message
    head, sep, rest = message.partition(": ")
    return rest if sep and head in ("inconclusive", "not applicable") else message
