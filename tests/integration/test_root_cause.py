"""Multi-failure models show the root cause first and the other findings explained by it, without a status
changed or a finding dropped (issue 16; the rules are tfcheck.report.root_cause's)."""
import json

import tfcheck
from reference_model.broken import HeadsMergedWithoutTranspose, LinearInFeaturesMismatch
from tfcheck.report.status import Status


def _by_check(report):
    return {f.check: f for f in report.models[0].findings()}


def test_a_crash_is_the_root_cause_of_every_check_it_blocks():
    report = tfcheck.run_checks(LinearInFeaturesMismatch)
    findings = _by_check(report)
    blocked = [f for f in findings.values() if f.evidence.get("blocked_by") == "forward.smoke"]
    assert blocked and all(f.explained_by == "forward.smoke" and f.status is Status.SKIP for f in blocked)
    assert json.loads(report.to_json())["models"][0]["root_causes"] == ["forward.smoke"]


def test_heads_merged_without_a_transpose_explain_the_leaks_they_cause():
    report = tfcheck.run_checks(HeadsMergedWithoutTranspose)
    findings = _by_check(report)
    assert findings["attention.heads"].status is Status.FAIL and findings["attention.heads"].explained_by is None
    for symptom in ("mask.causal", "mask.padding"):
        assert findings[symptom].status is Status.FAIL, symptom  # still reported, as a failure
        assert findings[symptom].explained_by == "attention.heads", symptom
    assert report.models[0].to_dict()["root_causes"] == ["attention.heads"]
    text = str(report)
    assert text.index("FAIL attention.heads\n") < text.index("FAIL mask.causal\n")
    assert "explained by: attention.heads" in text


def test_pytest_summary_lists_the_root_cause_first(pytester):
    spec = "reference_model.broken:HeadsMergedWithoutTranspose"
    result = pytester.runpytest("--tfcheck", spec)
    summary = " ".join(result.stdout.str().split("tfcheck summary")[-1].split())  # the terminal wraps lines
    assert summary.index(f"FAIL {spec}: 3 failed") < summary.index("FAIL attention.heads")
    assert summary.index("FAIL attention.heads") < summary.index("FAIL mask.causal (explained by attention.heads)")
