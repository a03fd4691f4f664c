"""A report in a REPL or a notebook: one line for ``repr()``, the text report for rich and, escaped, for HTML."""
from __future__ import annotations

import html
import io

from rich.console import Console

from tfcheck.report.findings import Finding
from tfcheck.report.report import CheckResult, ModelReport, Report
from tfcheck.report.status import Status
from tfcheck.ui.render import render_text


def model(spec: str, *statuses: Status) -> ModelReport:
    results = [CheckResult(f"check.{i}", f"check {i}", [Finding(f"check.{i}", s, f"finding <{i}>")])
               for i, s in enumerate(statuses)]
    return ModelReport(spec, results=results)


def test_a_model_report_and_a_one_model_report_are_one_line_with_the_headline_and_counts():
    one = model("reference_model:TransformerLM", Status.PASS, Status.PASS)
    assert repr(one) == "<ModelReport reference_model:TransformerLM: PASS 2 passed, 0 warnings>"
    assert repr(Report([one])) == "<Report reference_model:TransformerLM: PASS 2 passed, 0 warnings>"


def test_a_report_of_many_models_stays_one_line():
    models = [model(f"m{i}:Model", Status.PASS) for i in range(5)] + [model("bad:Model", Status.FAIL, Status.WARN)]
    text = repr(Report(models))
    assert "\n" not in text and len(text) < 300
    assert text.startswith("<Report FAIL, 6 models: m0:Model: PASS 1 passed, 0 warnings; ") and "and 3 more>" in text
    assert repr(Report()) == "<Report: no models>"


def test_rich_shows_the_text_report_and_html_escapes_it():
    report = Report([model("reference_model:TransformerLM", Status.PASS, Status.FAIL)])
    buf = io.StringIO()
    Console(file=buf, width=100, color_system=None).print(report)
    assert buf.getvalue() == render_text(report)
    page = report._repr_html_()
    assert page.startswith("<pre>") and page.endswith("</pre>")
    assert html.unescape(page[len("<pre>"):-len("</pre>")]) == str(report) and "&lt;1&gt;" in page
    assert report.models[0]._repr_html_() == page
