"""A check's result as a pytest outcome: what fails an item, and tfcheck's warnings raised at the model's line."""
from __future__ import annotations

import inspect
import warnings
from typing import Any

from tfcheck.report.findings import Finding
from tfcheck.report.report import CheckResult
from tfcheck.report.status import Status


class TfcheckWarning(UserWarning):
    """A check found something suspicious for which legitimate designs exist (status ``warn``)."""


class TfcheckFailure(Exception):
    """Raised by an item whose check failed; rendered by ``repr_failure`` without a traceback. ``reason`` says why
    a result that is not a failure of its own fails here (strictness, a budget overrun, -W error)."""

    def __init__(self, result: CheckResult, reason: str | None = None):
        super().__init__(result.check)
        self.result = result
        self.reason = reason


class TfcheckLoadError(Exception):
    """A model that cannot be loaded: shown as a collection error with the message only."""


STRICT = "a warning fails under --tfcheck-strict (or ini tfcheck_strict)"
AS_ERROR = "its warning was raised as an error by the warning filters (-W error, filterwarnings = error)"


def failure(result: CheckResult, smoke: CheckResult | None, subject: Any, *, strict: bool,
            smoke_reported: bool) -> TfcheckFailure | None:
    """Why this result fails its item, or None. ``smoke`` is forward.smoke's result when this is another check:
    a smoke over its budget blocks every other check, and is shown by them when its own item is not selected.
    A budget overrun fails where the model's ``budget_overrun`` declaration is "fail" (--tfcheck-budget-overrun
    and --tfcheck-strict declare it for every model)."""
    from tfcheck.engine.runner import over_budget

    if result.status in (Status.FAIL, Status.ERROR):
        return TfcheckFailure(result)
    if result.status is Status.WARN and strict:
        return TfcheckFailure(result, STRICT)
    # A check blocked by an over-budget smoke whose own item is not selected: its finding ("blocked by
    # forward.smoke: ...") quotes the smoke's.
    overran = over_budget(result) or (smoke is not None and over_budget(smoke) and not smoke_reported)
    if overran and subject.facts.budget_overrun == "fail":
        return TfcheckFailure(result, f"a check stopped by its time budget fails under budget_overrun=fail (from "
                                      f"{subject.source_of('budget_overrun')})")
    return None


def warn_at_model(label: str, result: CheckResult, origin: Any, fallback: str) -> None:
    """One TfcheckWarning per warning finding, raised at the finding's line or else the line defining the model
    (``origin``: its class or factory), so that pytest's summary and a ``-W error`` failure point at the model."""
    for finding in result.findings:
        if finding.status is Status.WARN:
            file, line = where(finding, origin, fallback)
            warnings.warn_explicit(TfcheckWarning(f"{label} {finding.check}: {finding.message}"), TfcheckWarning,
                                   file, line)


def where(finding: Finding, origin: Any, fallback: str) -> tuple[str, int]:
    """(file, line) a finding points at: its own location, else the model's definition, else ``fallback``:0."""
    loc = finding.location
    if loc is not None and loc.file and loc.line:
        return str(loc.file), int(loc.line)
    defined = definition(origin)
    return defined if defined is not None else (fallback, 0)


def definition(origin: Any) -> tuple[str, int] | None:
    """Where a model's class or factory is defined (an instance: its class); None when inspect cannot tell."""
    if not (inspect.isclass(origin) or inspect.isfunction(origin) or inspect.ismethod(origin)):
        origin = type(origin)
    try:
        file = inspect.getsourcefile(origin)
        line = inspect.getsourcelines(origin)[1]
    except (TypeError, OSError):
        return None
    return (file, line) if file else None
