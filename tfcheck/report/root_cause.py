"""Root cause first: which finding explains which, a relation computed when a model's report is assembled
(pytest items may run one by one on different xdist workers, so no check can know the others' findings).

The relation is set on evidence only, and it never changes a status or drops a finding:

- **blocking**: a check that could not run because another failed (evidence ``blocked_by``) is explained by it;
- **noise**: a measurement left inconclusive by randomness tfcheck could not neutralise (evidence
  ``nondeterministic``) is explained by ``dropout.eval`` when that check found randomness in eval mode;
- **the same op**: a *symptom* (a check that perturbs inputs or trains a copy and localises where the effect
  first appears: the flow, mask and training checks) whose location or related lines hit the line where a
  *structural* check located its defect (the head merge that mixes positions, the softmax over the wrong axis)
  is explained by that structural failure. Two symptoms on one line explain nothing (which came first is not
  evidence), nor does a warning (a correct design can look the same).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterator

from tfcheck.report.findings import Finding
from tfcheck.report.report import PROBLEMS, ModelReport
from tfcheck.report.status import Status

#: The check that measures randomness in eval mode; noise-blocked measurements are explained by its finding.
NOISE_CHECK = "dropout.eval"
#: The statuses a structural finding explains others with.
CAUSES = (Status.FAIL, Status.ERROR)
#: The evidence key a measurement left inconclusive by randomness carries.
NOISE_EVIDENCE = "nondeterministic"


def link(model: ModelReport, symptoms: Collection[str]) -> ModelReport:
    """Set ``explained_by`` on the findings of ``model`` (in place; returned for chaining). ``symptoms`` are the
    ids of the checks whose findings are effects that a structural finding on the same line explains."""
    causes = _structural_lines(model, symptoms)
    noisy = any(f.check == NOISE_CHECK and f.status in PROBLEMS for f in model.findings())
    for result in model.results:
        result.findings = [dataclasses.replace(f, explained_by=_cause_of(f, causes, noisy, symptoms))
                           for f in result.findings]
    return model


def in_cause_order(findings: list[Finding]) -> list[Finding]:
    """``findings`` with the root causes first and each explained finding after them, otherwise in order."""
    return sorted(findings, key=lambda f: f.explained_by is not None)


def _cause_of(f: Finding, causes: dict[tuple[str, int], str], noisy: bool, symptoms: Collection[str]) -> str | None:
    if f.explained_by is not None:
        return f.explained_by
    blocker = f.evidence.get("blocked_by")
    if isinstance(blocker, str) and blocker != f.check:
        return blocker
    if noisy and NOISE_EVIDENCE in f.evidence and f.check != NOISE_CHECK:
        return NOISE_CHECK
    if f.check not in symptoms or f.status is Status.PASS:
        return None
    for line in _lines_of(f):
        cause = causes.get(line)
        if cause is not None and cause != f.check:
            return cause
    return None


def _structural_lines(model: ModelReport, symptoms: Collection[str]) -> dict[tuple[str, int], str]:
    """(file, line) -> the first structural check (battery order) whose failure is located there. A warning is
    never a cause: it says a correct design can look the same."""
    found: dict[tuple[str, int], str] = {}
    for f in model.findings():
        if f.status in CAUSES and f.check not in symptoms and f.location is not None:
            line = _key(f.location.file, f.location.line)
            if line is not None:
                found.setdefault(line, f.check)
    return found


def _lines_of(f: Finding) -> Iterator[tuple[str, int]]:
    places = [(f.location.file, f.location.line)] if f.location is not None else []
    places += [(r.file, r.line) for r in f.related]
    for file, line in places:
        key = _key(file, line)
        if key is not None:
            yield key


def _key(file: str | None, line: int | None) -> tuple[str, int] | None:
    # Checks name files relative to the working directory or absolute; one line must be one key.
    return (os.path.realpath(file), line) if file and line else None
