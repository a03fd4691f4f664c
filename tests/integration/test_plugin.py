"""The pytest plugin, driven through pytester as a user would drive it."""
from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from tfcheck.engine import registry
from tfcheck.report.findings import Finding
from tfcheck.report.status import Status

LM = "reference_model:TransformerLM"
HEADLESS = "reference_model.broken:LMWithoutHead"
BAD_LINEAR = "reference_model.broken:LinearInFeaturesMismatch"
#: Selects the foundation's two checks, so outcome counts do not change as the battery grows.
FOUNDATION = ("-k", "smoke or contract")


def item_counts(spec: str, **declarations) -> tuple[int, int]:
    """A model's items: the checks that apply, and those collected because the trial forward may make them
    apply (skipped with their reason when it does not)."""
    from tfcheck.engine.runner import applicable_checks, load_subject, may_apply_after_trial
    from tfcheck.model.facts.declarations import from_mapping

    subject = load_subject(spec, from_mapping(declarations, "test"))
    applicable = applicable_checks(subject)
    return len(applicable), len(may_apply_after_trial(subject, applicable))


def battery_size(spec: str, **declarations) -> int:
    """How many items the battery has for a model."""
    return sum(item_counts(spec, **declarations))


def test_one_item_per_check_with_readable_ids(pytester):
    result = pytester.runpytest("--tfcheck", LM, "--collect-only", "-q")
    result.stdout.fnmatch_lines([f"tfcheck[{LM}]::forward.smoke", f"tfcheck[{LM}]::shape.contract"])


def test_reference_model_passes(pytester):
    result = pytester.runpytest("--tfcheck", LM)
    applicable, late = item_counts(LM)
    result.assert_outcomes(passed=applicable, skipped=late)  # late: may apply after the trial, skipped if not
    result.stdout.fnmatch_lines(["*tfcheck summary*", f"PASS {LM}: * passed, 0 warnings"])


def test_failure_shows_findings_and_row_without_internal_traceback(pytester):
    result = pytester.runpytest("--tfcheck", HEADLESS, *FOUNDATION)
    result.assert_outcomes(passed=1, failed=1, deselected=battery_size(HEADLESS) - 2)
    out = result.stdout.str()
    assert "row [output-shape]" in out
    assert "expected (1, 1, 101)" in out
    assert "Traceback" not in out and "tfcheck/engine/runner.py" not in out and "TfcheckFailure" not in out


def test_blocked_checks_are_skipped_not_failed_again(pytester):
    result = pytester.runpytest("--tfcheck", BAD_LINEAR, "-rs")
    result.assert_outcomes(failed=1, skipped=battery_size(BAD_LINEAR) - 1)
    result.stdout.fnmatch_lines(["*blocked by forward.smoke*"])


# Specs that do not load, bad declarations, unwritable JSON paths: the table in test_reliability.py.
def test_a_path_is_not_misread_as_a_spec(pytester):
    result = pytester.runpytest("--tfcheck", "tests/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot read the model spec 'tests/'*MODULE:ATTR*"])


def test_keyword_selection_works_on_check_ids(pytester):
    result = pytester.runpytest("--tfcheck", LM, "-k", "contract")
    result.assert_outcomes(passed=1, deselected=battery_size(LM) - 1)


def test_set_declarations_outrank_the_models_own(pytester):
    result = pytester.runpytest("--tfcheck", LM, "--tfcheck-set", "kind=encoder", *FOUNDATION)
    result.assert_outcomes(passed=1, failed=1, deselected=battery_size(LM, kind="encoder") - 2)
    result.stdout.fnmatch_lines(["*expected (1, 1, 32)*"])


def test_accepted_failure_passes_and_is_listed(pytester):
    result = pytester.runpytest("--tfcheck", HEADLESS,
                                "--tfcheck-set", "accept=shape.contract:hidden states on purpose", *FOUNDATION)
    result.assert_outcomes(passed=2, deselected=battery_size(HEADLESS) - 2)
    summary = " ".join(result.stdout.str().split("tfcheck summary")[1].split())
    assert "ACCEPTED reference_model.broken:LMWithoutHead: 1 passed, 0 warnings, 1 accepted" in summary
    assert "ACCEPTED shape.contract (accepted: hidden states on purpose)" in summary


def test_json_report_validates_against_the_schema(pytester):
    out = pytester.path / "report.json"
    pytester.runpytest("--tfcheck", LM, "--tfcheck", HEADLESS, "--tfcheck-json", str(out), *FOUNDATION)
    data = json.loads(out.read_text())
    jsonschema.validate(data, json.loads(resources.files("tfcheck").joinpath("data/report.schema.json").read_text()))
    assert [m["spec"] for m in data["models"]] == [LM, HEADLESS]
    assert [m["status"] for m in data["models"]] == ["pass", "fail"]


def test_tfcheck_all_runs_the_models_listed_in_pyproject(pytester):
    pytester.makepyprojecttoml(f"""
        [[tool.tfcheck.models]]
        spec = "{LM}"

        [[tool.tfcheck.models]]
        spec = "{HEADLESS}"
        accept = {{"shape.contract" = "this model returns hidden states"}}
    """)
    result = pytester.runpytest("--tfcheck-all", *FOUNDATION)
    result.assert_outcomes(passed=4, deselected=battery_size(LM) + battery_size(HEADLESS) - 4)


@pytest.fixture
def warning_check():
    """A check that warns, registered for one test: the battery has no warn-only check of its own yet."""
    @registry.check("test.warns", "a check that always warns", rows=("output-shape",))
    def warns(ctx):
        return [Finding("test.warns", Status.WARN, "suspicious but maybe legitimate", row="output-shape")]

    yield
    registry._REGISTRY.pop("test.warns")


def test_warn_passes_with_a_pytest_warning_and_a_summary_line(pytester, warning_check):
    result = pytester.runpytest("--tfcheck", LM, "-W", "default", "-k", "smoke or contract or warns")
    result.assert_outcomes(passed=3, warnings=1, deselected=battery_size(LM) - 3)
    result.stdout.fnmatch_lines(["*TfcheckWarning*suspicious but maybe legitimate*",
                                 "*WARN test.warns*: suspicious but maybe legitimate*"])


def test_strict_turns_warnings_into_failures(pytester, warning_check):
    result = pytester.runpytest("--tfcheck", LM, "--tfcheck-strict", "-k", "smoke or contract or warns")
    result.assert_outcomes(passed=2, failed=1, deselected=battery_size(LM) - 3)


def test_parallel_run_gives_the_same_results_as_a_serial_run(pytester):
    # The whole battery of a passing and a failing model: under -n 2 each worker loads the models and runs
    # its share of the checks, so a check that depends on another having run first would differ here.
    pytest.importorskip("xdist")
    serial, parallel = pytester.path / "serial.json", pytester.path / "parallel.json"
    args = ["--tfcheck", LM, "--tfcheck", HEADLESS, "-p", "no:cacheprovider"]
    one = pytester.runpytest_subprocess(*args, "--tfcheck-json", str(serial))
    two = pytester.runpytest_subprocess(*args, "-n", "2", "--tfcheck-json", str(parallel))
    def outcomes(run):
        return {k: v for k, v in run.parseoutcomes().items() if k in ("passed", "failed", "skipped", "errors")}

    assert outcomes(one) == outcomes(two) and outcomes(one)["failed"] >= 1

    def verdicts(path):  # all but timings and costs (a probe is charged to the first check that runs it)
        return [(m["spec"], m["status"], m["assumptions"], c["check"], c["status"],
                 [(f["status"], f["message"], f["evidence"], f["row"]) for f in c["findings"]])
                for m in json.loads(path.read_text())["models"] for c in m["checks"]]

    assert len(verdicts(serial)) == item_counts(LM)[0] + item_counts(HEADLESS)[0]  # no report line for a skip
    assert verdicts(serial) == verdicts(parallel)


def test_loading_the_plugin_does_not_import_torch_or_rich(tmp_path):
    code = ("import sys, pytest; pytest.main(['--help']); "
            "sys.stderr.write('TORCH_LOADED=%s RICH_LOADED=%s' % ('torch' in sys.modules, 'rich' in sys.modules))")
    # Outside this repository, so that only the installed plugin loads (our own conftest imports torch).
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "--tfcheck=SPEC" in done.stdout
    assert "TORCH_LOADED=False RICH_LOADED=False" in done.stderr


def test_cli_and_plugin_agree(pytester, capsys):
    from tfcheck.cli import main

    out = pytester.path / "plugin.json"
    pytester.runpytest("--tfcheck", HEADLESS, "--tfcheck", LM, "--tfcheck-json", str(out), *FOUNDATION)
    cli_json = pytester.path / "cli.json"
    assert main(["check", HEADLESS, LM, "--json", str(cli_json), "--only", "forward.smoke,shape.contract"]) == 1

    def verdicts(path):
        return [(m["spec"], c["check"], c["status"]) for m in json.loads(path.read_text())["models"]
                for c in m["checks"]]

    assert verdicts(out) == verdicts(cli_json)


def test_deselecting_forward_smoke_does_not_hide_a_broken_forward(pytester):
    result = pytester.runpytest("--tfcheck", BAD_LINEAR, "-k", "contract")
    result.assert_outcomes(failed=1, deselected=battery_size(BAD_LINEAR) - 1)
    out = " ".join(result.stdout.str().split())
    assert "forward.smoke (not selected) failed, so shape.contract cannot run" in out and "mat1 and mat2" in out


def test_junit_xml_carries_no_payload(pytester):
    xml = pytester.path / "junit.xml"
    pytester.runpytest("--tfcheck", LM, f"--junitxml={xml}", *FOUNDATION).assert_outcomes(
        passed=2, deselected=battery_size(LM) - 2)
    text = xml.read_text()
    assert 'tests="2"' in text and "tfcheck_payload" not in text and '"findings"' not in text


def test_a_check_the_trial_forward_makes_apply_runs_under_pytest_as_in_tfcheck_check(pytester, monkeypatch):
    """PadIdSeq2Seq builds its padding mask inside from its pad ids: only the trial forward shows it, so
    numerics.nan_source applies after the trial. Collection runs no forward; the item is collected anyway, and
    pytest and tfcheck check report the same checks."""
    support = str(Path(__file__).resolve().parents[1] / "support")
    pytester.syspathinsert(support)
    spec = "frontdoor_call_pads:PadIdSeq2Seq"
    result = pytester.runpytest("--tfcheck", spec, "--tfcheck-json", "p.json", "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()[-3000:]
    monkeypatch.syspath_prepend(support)
    monkeypatch.chdir(pytester.path)
    from tfcheck.cli import main

    main(["check", spec, "--json", "c.json"])
    checks = {name: [c["check"] for c in json.loads((pytester.path / name).read_text())["models"][0]["checks"]]
              for name in ("p.json", "c.json")}
    assert "numerics.nan_source" in checks["c.json"]
    assert checks["p.json"] == checks["c.json"]


def test_only_checks_whose_applicability_reads_a_fact_the_trial_settles_are_collected_late():
    from tfcheck.engine.runner import applicable_checks, load_subject, may_apply_after_trial

    subject = load_subject("reference_model:TransformerLM", {})
    late = {c.id for c in may_apply_after_trial(subject, applicable_checks(subject))}
    assert late == set()  # its two inapplicable checks are so by its signature: no forward changes that
    quickstart = Path(__file__).resolve().parents[2] / "docs" / "examples" / "quickstart"
    mymodel = load_subject(str(quickstart / "mymodel.py") + ":Model")
    late = {c.id for c in may_apply_after_trial(mymodel, applicable_checks(mymodel))}
    assert late == {"mask.padding", "numerics.nan_source", "embedding.padding"}  # a padding mask built inside
