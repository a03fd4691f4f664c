"""``tfcheck_run``: the library's run and assertion for users' own tests, with the session's strictness.

Named ``tfcheck_run``, not ``tfcheck``: a fixture argument called ``tfcheck`` would hide the ``tfcheck`` module
inside a test that also uses ``tfcheck.run_checks`` or ``tfcheck.Status``.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tfcheck.pytest_plugin.settings import Settings
from tfcheck.report.report import Report


class TfcheckRun:
    """``check(model, **declarations)`` returns the report; ``assert_pass(model, **declarations)`` fails the test
    with the report's problems as text. Strictness and the ``budget_overrun`` declaration default to the
    session's (``--tfcheck-strict``, ``--tfcheck-budget-overrun`` or their ini keys)."""

    def __init__(self, settings: Settings):
        self.strict = settings.strict
        self.budget_overrun = settings.budget_overrun

    def __repr__(self) -> str:
        return f"TfcheckRun(strict={self.strict}, budget_overrun={self.budget_overrun!r})"

    def check(self, model: Any, *, only: Iterable[str] | None = None, **declarations: Any) -> Report:
        """:func:`tfcheck.run_checks`: a spec string, a module class or factory, or an instance."""
        from tfcheck.api import run_checks

        if self.budget_overrun is not None:
            declarations.setdefault("budget_overrun", self.budget_overrun)
        return run_checks(model, only=only, **declarations)

    def assert_pass(self, model_or_report: Any, *, strict: bool | None = None, only: Iterable[str] | None = None,
                    **declarations: Any) -> Report:
        """Fail the test (an AssertionError whose message is the problems' text) unless the report has no failure,
        no warning when strict, and no budget overrun where ``budget_overrun`` is "fail"; returns the report."""
        __tracebackhide__ = True  # the failure points at the test's own line
        from tfcheck.api import assert_checks_pass

        report = model_or_report if isinstance(model_or_report, Report) else self.check(
            model_or_report, only=only, **declarations)
        return assert_checks_pass(report, strict=self.strict if strict is None else strict)
