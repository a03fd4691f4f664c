"""Root cause first (tfcheck.report.root_cause): a relation set on evidence only, never a change of status."""
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.report import CheckResult, ModelReport
from tfcheck.report.root_cause import in_cause_order, link
from tfcheck.report.status import Status

SYMPTOMS = {"mask.causal", "mask.padding"}
MERGE = Location("layers.0.attn", "model.py", 27)


def _model(*findings: Finding) -> ModelReport:
    return ModelReport("m", results=[CheckResult(f.check, f.check, [f]) for f in findings])


def _explained(model: ModelReport) -> dict[str, str | None]:
    return {f.check: f.explained_by for f in model.findings()}


def test_a_symptom_born_at_the_op_a_structural_check_blames_is_explained_by_it():
    model = link(_model(Finding("mask.causal", Status.FAIL, "leak", Location("layers.0", "model.py", 40),
                                related=(Related("leak first appears", "model.py", 27),)),
                        Finding("attention.heads", Status.FAIL, "merge without transpose", MERGE)), SYMPTOMS)
    assert _explained(model) == {"mask.causal": "attention.heads", "attention.heads": None}
    assert [f.status for f in model.findings()] == [Status.FAIL, Status.FAIL]  # a relation, not a verdict


def test_a_symptom_elsewhere_is_its_own_root_cause():
    model = link(_model(Finding("mask.causal", Status.FAIL, "leak", Location("layers.0", "model.py", 12)),
                        Finding("attention.heads", Status.FAIL, "merge", MERGE)), SYMPTOMS)
    assert _explained(model)["mask.causal"] is None


def test_two_symptoms_on_one_line_explain_nothing():
    model = link(_model(Finding("mask.causal", Status.FAIL, "leak", MERGE),
                        Finding("mask.padding", Status.FAIL, "leak", MERGE)), SYMPTOMS)
    assert set(_explained(model).values()) == {None}


def test_a_structural_finding_is_never_explained_by_a_symptom_on_its_line():
    model = link(_model(Finding("attention.heads", Status.FAIL, "merge", MERGE),
                        Finding("mask.causal", Status.FAIL, "leak", MERGE)), SYMPTOMS)
    assert _explained(model) == {"attention.heads": None, "mask.causal": "attention.heads"}


def test_a_blocked_check_is_explained_by_the_check_that_blocked_it():
    model = link(_model(Finding("forward.smoke", Status.FAIL, "raised", MERGE),
                        Finding("shape.contract", Status.SKIP, "blocked", evidence={"blocked_by": "forward.smoke"})),
                 SYMPTOMS)
    assert _explained(model)["shape.contract"] == "forward.smoke"


def test_noise_explains_only_what_says_it_was_noisy_and_only_when_dropout_eval_found_noise():
    noisy = Finding("mask.causal", Status.SKIP, "inconclusive: outputs differ run to run",
                    evidence={"nondeterministic": {"largest_difference": 0.3}})
    real = Finding("mask.padding", Status.FAIL, "leak", Location("layers.0", "model.py", 12))
    dropout = Finding("dropout.eval", Status.FAIL, "dropout active in eval", Location("layers.0", "model.py", 5))
    assert _explained(link(_model(noisy, real, dropout), SYMPTOMS)) == {
        "mask.causal": "dropout.eval", "mask.padding": None, "dropout.eval": None}
    assert _explained(link(_model(noisy), SYMPTOMS))["mask.causal"] is None


def test_root_causes_come_first_and_are_listed_in_the_json():
    model = link(_model(Finding("mask.causal", Status.FAIL, "leak", MERGE),
                        Finding("attention.heads", Status.FAIL, "merge", MERGE)), SYMPTOMS)
    assert [f.check for f in in_cause_order(list(model.findings()))] == ["attention.heads", "mask.causal"]
    assert model.to_dict()["root_causes"] == ["attention.heads"]
    assert [f["explained_by"] for c in model.to_dict()["checks"] for f in c["findings"]] == ["attention.heads", None]


def test_files_named_relative_or_absolute_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    absolute = Location("layers.0.attn", str(tmp_path / "model.py"), 27)
    model = link(_model(Finding("mask.causal", Status.FAIL, "leak", MERGE),
                        Finding("attention.heads", Status.FAIL, "merge", absolute)), SYMPTOMS)
    assert _explained(model)["mask.causal"] == "attention.heads"


def test_a_warning_explains_nothing():
    model = link(_model(Finding("mask.padding", Status.FAIL, "leak", MERGE),
                        Finding("attention.heads", Status.WARN, "inputs already mix positions", MERGE)), SYMPTOMS)
    assert _explained(model)["mask.padding"] is None
