"""A forward that raises on tfcheck's small sizes where the model as written runs is a size constraint: the model
is checked at its defaults, and the report says which error made it so, and where; a forward that raises at
both sizes is the user's bug, reported with the small model's error."""
from __future__ import annotations

import tfcheck

FILE = "tests/support/frontdoor_build/forward_size_constraint.py"


def test_a_forward_that_needs_its_default_width_is_checked_at_its_defaults(monkeypatch):
    monkeypatch.chdir(tfcheck.__path__[0] + "/..")
    report = tfcheck.run_checks(f"{FILE}:RotaryLM", only=["forward.smoke", "shape.contract"])
    model = report.models[0]
    constraint = next(a for a in model.assumptions if a.key == "size constraint")
    assert "forward_size_constraint.py:" in constraint.value and "d_model 128→32" in constraint.source
    assert next(a.value for a in model.assumptions if a.key == "d_model") == 128
    smoke, contract = model.results
    # Said, not passed over: at the defaults two sizes may be equal and hide a swapped axis.
    assert smoke.status is tfcheck.Status.WARN and "raised at tfcheck's small sizes" in smoke.findings[0].message
    assert contract.status is tfcheck.Status.PASS


def test_the_rebuilt_model_runs_its_checks_in_eval_mode_like_any_model(monkeypatch):
    monkeypatch.chdir(tfcheck.__path__[0] + "/..")
    report = tfcheck.run_checks(f"{FILE}:RotaryLM", kwargs={"dropout": 0.5},
                                only=["forward.smoke", "batch.independence", "dropout.eval"])
    statuses = {r.check: r.status for r in report.models[0].results}
    assert statuses["batch.independence"] is tfcheck.Status.PASS and statuses["dropout.eval"] is tfcheck.Status.PASS


def test_a_forward_that_raises_at_every_size_reports_the_small_models_error(monkeypatch):
    monkeypatch.chdir(tfcheck.__path__[0] + "/..")
    report = tfcheck.run_checks(f"{FILE}:BrokenEverywhere", only=["forward.smoke"])
    model = report.models[0]
    smoke = model.results[0].findings[0]
    assert smoke.status is tfcheck.Status.FAIL and "mat1 and mat2" in smoke.message
    assert not any(a.key == "size constraint" for a in model.assumptions)
    assert next(a.value for a in model.assumptions if a.key == "d_model") == 32  # still the small build
