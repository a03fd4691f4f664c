"""CI adoption: GitHub annotations (tfcheck.ui.annotations, `--tfcheck-format=github`, `tfcheck check --format github`),
and docs/ci.md run as written: its pyproject entries, its model file and the exact pytest command of its workflow."""
from __future__ import annotations

import inspect
import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tfcheck
from tfcheck import cli
from tfcheck.report.findings import Finding, Location
from tfcheck.report.report import CheckResult, ModelReport, Report
from tfcheck.report.status import Status
from tfcheck.ui import annotations

DOCS = Path(__file__).resolve().parents[2] / "docs"
CI_PAGE = DOCS / "ci.md"


def fenced(lang: str, page: Path = CI_PAGE) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"^```{lang}\n(.*?)^```", page.read_text("utf-8"), re.M | re.S)]


def workflow_command() -> str:
    """The pytest line of the workflow in docs/ci.md, exactly as CI runs it."""
    (workflow,) = fenced("yaml")
    (line,) = [ln for ln in workflow.splitlines() if "pytest --tfcheck-all" in ln]
    return line.split("run:", 1)[1].strip()


def test_escaping_follows_githubs_workflow_command_rules():
    assert annotations.escape_data("100% done\r\nnext: a, b") == "100%25 done%0D%0Anext: a, b"
    assert annotations.escape_property("C:\\x,y%\n") == "C%3A\\x%2Cy%25%0A"
    line = annotations.command("error", "50%: bad\nfix it", file="src/m,odel.py", line=7, title="mask.causal")
    assert line == "::error file=src/m%2Codel.py,line=7,title=mask.causal::50%25: bad%0Afix it"
    assert annotations.command("warning", "w") == "::warning::w"


def _report(*findings: Finding, spec: str = "reference_model.broken:CausalMaskOffByOne") -> Report:
    results = [CheckResult(f.check, f.check, [f]) for f in findings]
    return Report([ModelReport(spec, [], results)])


def test_one_line_per_problem_at_the_findings_line_or_the_models_definition(tmp_path, monkeypatch):
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    report = _report(
        Finding("mask.causal", Status.FAIL, "leaks", Location(module="layers.0"), row="causal-mask-misaligned"),
        Finding("batch.independence", Status.WARN, "mixes",
                Location("layers.0", str(root / "reference_model/layers.py"), 22)),
        Finding("attention.scale", Status.ACCEPTED, "accepted"), Finding("shape.contract", Status.PASS, "fine"),
        Finding("mask.padding", Status.SKIP, "inconclusive"), Finding("decode.cache", Status.ERROR, "tfcheck broke"))
    lines = annotations.github_annotations(report, workspace=root)
    assert len(lines) == 3
    # no line in the finding: the class that defines the model
    from reference_model.broken import CausalMaskOffByOne

    defined = inspect.getsourcelines(CausalMaskOffByOne)[1]
    assert lines[0].startswith(f"::error file=reference_model/broken/masks.py,line={defined},title=mask.causal::"
                               "reference_model.broken:CausalMaskOffByOne: leaks%0Atroubleshooting "
                               "[causal-mask-misaligned] ")
    assert "; fix: " in lines[0]
    assert lines[1].startswith("::warning file=reference_model/layers.py,line=22,title=batch.independence::")
    assert lines[2].startswith("::error file=reference_model/broken/masks.py")  # an error of tfcheck: its check
    # outside the workspace: no file property, the path in the message
    outside = annotations.github_annotations(report, workspace=tmp_path)
    assert outside[1].startswith("::warning title=batch.independence::")
    assert "reference_model/layers.py:22)" in outside[1]


def test_the_workspace_comes_from_github_workspace(monkeypatch, tmp_path):
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("GITHUB_WORKSPACE", str(root / "reference_model"))
    report = _report(Finding("mask.causal", Status.FAIL, "leaks"))
    assert annotations.github_annotations(report)[0].startswith("::error file=broken/masks.py,line=")


def test_specs_that_name_nothing_inspectable_still_annotate():
    for spec in ("CausalMaskOffByOne", "no_such_module_xyz:Model", "<GPT instance>"):
        (line,) = annotations.github_annotations(_report(Finding("mask.causal", Status.FAIL, "x"), spec=spec))
        assert line == f"::error title=mask.causal::{spec}: x".replace("%", "%25")


def test_tfcheck_check_format_github_prints_annotations_after_the_report(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    code = cli.main(["check", "reference_model.broken:CausalMaskOffByOne", "--only", "mask.causal",
                     "--format", "github"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAIL
    text, _, tail = out.partition("\n::error ")
    assert "tfcheck reference_model.broken:CausalMaskOffByOne" in text
    assert tail.startswith("file=reference_model/broken/masks.py,line=") and tail.count("\n") == 1
    cli.main(["check", "reference_model.broken:CausalMaskOffByOne", "--only", "mask.causal"])
    assert "::error" not in capsys.readouterr().out  # text is the default


def test_bad_format_values_are_usage_errors(pytester, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(["check", "--format", "xml"])
    assert exc.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err
    result = pytester.runpytest("--tfcheck", "reference_model:TransformerLM", "--tfcheck-format=xml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tfcheck-format: invalid choice: 'xml' (choose from 'text', 'github')*"])


def _junit_id(case) -> str:
    """tfcheck[SPEC]::CHECK_ID: pytest 9.0 writes it all as the name, pytest 9.2 splits it into classname
    tfcheck[SPEC] and name CHECK_ID."""
    classname, name = case.get("classname") or "", case.get("name")
    return f"{classname}::{name}" if classname and "::" not in name else name


def test_the_docs_ci_page_runs_as_written(pytester, monkeypatch):
    """docs/ci.md's pyproject entries, its mymodel.py and the workflow's exact pytest command: JUnit XML with one
    testcase per check, and one ::error line at the model's source line for the one failure."""
    (pyproject,) = fenced("toml")
    model_code = (DOCS / "examples" / "ci" / "mymodel.py").read_text("utf-8")  # the page shows this file
    pytester.makepyprojecttoml(pyproject)
    (pytester.path / "mymodel.py").write_text(model_code)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path))
    argv = shlex.split(workflow_command())
    assert argv[:2] == ["pytest", "--tfcheck-all"] and "--tfcheck-format=github" in argv
    result = pytester.runpytest(*argv[1:])
    assert result.ret == pytest.ExitCode.TESTS_FAILED

    suite = ET.parse(pytester.path / "reports" / "tfcheck.xml").getroot().find("testsuite")
    cases = {_junit_id(case): case for case in suite.iter("testcase")}
    failed = sorted(name for name, case in cases.items() if case.find("failure") is not None)
    assert failed == ["tfcheck[mymodel:GPT]::mask.causal"]
    assert "tfcheck[reference_model:TransformerLM]::mask.causal" in cases
    assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) == 1
    assert "diagonal off by one" in cases[failed[0]].find("failure").get("message")

    # the annotation sits on the line to change: where the look-ahead triangle is built with the wrong diagonal
    defect_line = next(i for i, text in enumerate(model_code.splitlines(), 1) if "torch.triu(" in text)
    errors = [line for line in result.outlines if line.startswith("::")]
    assert len(errors) == 1
    assert errors[0].startswith(f"::error file=mymodel.py,line={defect_line},title=mask.causal::mymodel:GPT: causal "
                                "leak (diagonal off by one): ")
    assert "still leaks with batch 1, length 2" in errors[0]
    assert "%0Atroubleshooting [causal-mask-misaligned]" in errors[0]
    # the annotation the page shows is the one this run prints, up to the measured numbers
    (shown,) = [ln for block in fenced("console") for ln in block.splitlines() if ln.startswith("::error")]
    numbers = re.compile(r"\d+(\.\d+)?")
    assert numbers.sub("N", shown) == numbers.sub("N", errors[0])


def test_the_docs_workflow_installs_the_cpu_wheel_and_uploads_the_report():
    (workflow,) = fenced("yaml")
    assert "actions/checkout@" in workflow and "actions/setup-python@" in workflow
    assert "--index-url https://download.pytorch.org/whl/cpu" in workflow
    assert "actions/upload-artifact@" in workflow and "path: reports/tfcheck.xml" in workflow


def test_run_checks_reports_format_independently():
    # the format changes what is printed, never the report
    report = tfcheck.run_checks("reference_model:TransformerLM", only=["shape.contract"])
    assert annotations.github_annotations(report) == []


TWO_FILES_SAME_NAME = '''
import torch.nn as nn

{pad}class Model(nn.Module):
    __tfcheck__ = {{"kind": "decoder"}}

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids)) * 100  # a loss at init far above ln(vocab)
'''


def test_two_model_files_with_the_same_name_are_two_modules_each_annotated_at_its_own_line(tmp_path, monkeypatch):
    # Imported under the file's stem alone, b/model.py replaced a/model.py and both annotations named b's line.
    for folder, pad in (("a", ""), ("b", "\n" * 5)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "model.py").write_text(TWO_FILES_SAME_NAME.format(pad=pad))
    monkeypatch.chdir(tmp_path)
    reports = [tfcheck.run_checks(f"{folder}/model.py:Model", only=["train.loss_at_init"]) for folder in ("a", "b")]
    report = Report([m for r in reports for m in r.models])
    lines = annotations.github_annotations(report, workspace=tmp_path)
    # each warning sits in its own file, at the line that built the head (its construction site)
    head = [next(i for i, text in enumerate((tmp_path / folder / "model.py").read_text().splitlines(), 1)
                 if "nn.Linear(" in text) for folder in ("a", "b")]
    assert head[0] != head[1]
    assert [line.split(",title=")[0] for line in lines] == [f"::warning file=a/model.py,line={head[0]}",
                                                            f"::warning file=b/model.py,line={head[1]}"]
