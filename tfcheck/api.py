"""The public API for users' own tests: run the battery, and assert that it passed."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tfcheck.report.report import Report


def run_checks(model_or_spec: Any, *, only: Iterable[str] | None = None, **declarations: Any) -> Report:
    """Run the battery on a model and return its report.

    ``model_or_spec`` is a spec string (``"mymodel:Model"`` or ``"path/model.py:build"``), an ``nn.Module``
    subclass or factory, or a module instance. Keyword arguments are declarations (``kind="decoder"``,
    ``mask="attention_mask:keep"``, ``accept={"shape.contract": "returns pooled output"}``; see
    docs/declarations.md); they outrank pyproject entries and the model's ``__tfcheck__``.
    ``only`` limits the run to some check ids (forward.smoke always runs first).

    The model is left exactly as it was. Bad input raises :class:`tfcheck.UsageError` with what to do.
    """
    from tfcheck.battery import all_checks
    from tfcheck.engine.runner import load_declared, run_model
    from tfcheck.ui import views  # noqa: F401 - registers how a report prints

    all_checks()  # the engine runs the battery its front end loads
    return Report([run_model(load_declared(model_or_spec, declarations, "run_checks() argument"), only)])


def assert_checks_pass(report_or_model: Any, *, strict: bool = False, **declarations: Any) -> Report:
    """Assert that a report (or a model, checked now) has no failure; with ``strict`` no warning either.

    Raises AssertionError whose message is the rendered findings.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    report = report_or_model if isinstance(report_or_model, Report) else run_checks(report_or_model, **declarations)
    if report.failed(strict=strict):
        from tfcheck.ui.render import render_text

        raise AssertionError("tfcheck found problems:\n" + render_text(report, only_problems=True)
                             + "".join(f"{line}\n" for line in _failed_overruns(report)))
    return report


def _failed_overruns(report: Report) -> list[str]:
    """The checks stopped by their time budget in models whose ``budget_overrun`` is "fail": failures of the
    report, though their status is a skip (which the problems' text leaves out)."""
    from tfcheck.engine.runner import over_budget

    return [f"over budget (budget_overrun=fail): {m.spec} {r.check}: {f.message}" for m in report.models
            if m.budget_overrun == "fail" for r in m.results if over_budget(r) for f in r.findings]
