"""The headline rule (tfcheck.report.verdict): the worst decided outcome heads a model, and inconclusive is never a
plain pass."""
from __future__ import annotations

import json

from tfcheck.report.findings import Finding
from tfcheck.report.report import CheckResult, ModelReport, Report
from tfcheck.report.status import Status


def _result(check: str, status: Status, message: str = "m", **evidence) -> CheckResult:
    return CheckResult(check, check, [Finding(check, status, message, evidence=evidence)], seconds=0.5)


def _model(*results: CheckResult) -> ModelReport:
    return ModelReport("spec", results=list(results))


def test_an_inconclusive_check_beside_passes_heads_pass_with_its_reason_never_a_plain_pass():
    model = _model(_result("a.one", Status.PASS),
                   _result("a.two", Status.SKIP, "inconclusive: the positive control did not move"))
    assert model.status is Status.PASS
    assert model.verdict.headline == "PASS, 1 inconclusive: a.two: the positive control did not move"
    assert model.verdict.counts_text() == "1 passed, 0 warnings, 1 inconclusive"


def test_several_undecided_checks_name_the_first_and_count_the_rest():
    model = _model(_result("a.one", Status.PASS), _result("a.two", Status.SKIP, "inconclusive: x"),
                   _result("a.three", Status.SKIP, "stopped", blocked_by="budget_s"))
    assert model.verdict.headline == "PASS, 1 inconclusive and 1 over budget: a.two: x (and 1 more)"


def test_a_failure_heads_fail_and_the_checks_it_blocks_are_counted_as_blocked():
    model = _model(_result("forward.smoke", Status.FAIL, "raised"),
                   _result("a.two", Status.SKIP, "blocked by forward.smoke: raised", blocked_by="forward.smoke"))
    assert model.status is Status.FAIL and model.verdict.headline == "FAIL"
    assert model.verdict.counts_text() == "1 failed, 1 blocked, 0 warnings"


def test_a_warning_outranks_an_inconclusive_check_and_no_decided_check_heads_skip():
    assert _model(_result("a", Status.WARN), _result("b", Status.SKIP, "inconclusive: x")).status is Status.WARN
    assert _model(_result("a", Status.SKIP, "inconclusive: x")).status is Status.SKIP


def test_the_json_keeps_the_headline_and_the_count_of_each_outcome():
    model = _model(_result("a", Status.PASS), _result("b", Status.SKIP, "inconclusive: x"))
    data = json.loads(Report([model]).to_json())["models"][0]
    assert data["status"] == "pass" and data["headline"].startswith("PASS, 1 inconclusive")
    assert data["counts"] == {"failed": 0, "errors": 0, "blocked": 0, "over_budget": 0, "passed": 1, "warnings": 0,
                              "inconclusive": 1, "accepted": 0}


def test_one_warning_is_one_warning():
    assert _model(_result("a", Status.WARN), _result("b", Status.ERROR)).verdict.counts_text() == "1 error, 1 warning"
