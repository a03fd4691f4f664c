"""The pytest plugin: ``pytest --tfcheck SPEC`` runs the battery as one test item per check per model.

Only wiring lives here; the library does the work. Importing this module does not import torch: that
happens when a model is collected, so ``pytest --help`` stays fast.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from tfcheck.errors import TfcheckError
from tfcheck.ui.annotations import FORMATS

if TYPE_CHECKING:
    from tfcheck.engine.registry import Check
    from tfcheck.engine.runner import Runner
    from tfcheck.model.project_config import Entry


class TfcheckWarning(UserWarning):
    """A check found something suspicious for which legitimate designs exist (status ``warn``)."""


class TfcheckFailure(Exception):
    """Raised by an item whose check failed; rendered by ``repr_failure`` without a traceback."""

    def __init__(self, result):
        super().__init__(result.check)
        self.result = result


class TfcheckLoadError(Exception):
    """A model that cannot be loaded: shown as a collection error with the message only."""


@dataclass
class PluginState:
    specs: list[Entry]  # the models to check, with their declarations from pyproject
    cli: dict
    strict: bool
    json_path: Path | None
    invocation_dir: Path
    images: bool = False
    format: str = "text"  # "github": annotations after the summary
    results: list[dict] = field(default_factory=list)  # payloads from test reports, xdist-safe


STATE = pytest.StashKey[PluginState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tfcheck", "Transformer diagnostics (tfcheck)")
    group.addoption("--tfcheck", action="append", default=[], metavar="SPEC",
                    help="run the tfcheck battery on a model: MODULE:ATTR or path/to/file.py:ATTR (repeatable)")
    group.addoption("--tfcheck-all", action="store_true",
                    help="run the tfcheck battery on every model in [[tool.tfcheck.models]] of pyproject.toml")
    group.addoption("--tfcheck-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a declaration for every --tfcheck model, e.g. kind=decoder (see `tfcheck list`)")
    group.addoption("--tfcheck-strict", action="store_true", help="tfcheck warnings fail their items")
    group.addoption("--tfcheck-json", metavar="PATH", help="write the tfcheck report as JSON to PATH")
    group.addoption("--tfcheck-images", action="store_true",
                    help="with --tfcheck-json: draw each leak map as a PNG beside the report (needs matplotlib)")
    group.addoption("--tfcheck-format", choices=FORMATS, default="text",
                    help="github: also print a GitHub Actions ::error/::warning annotation per tfcheck problem")


def pytest_configure(config: pytest.Config) -> None:
    opt = config.option
    if not (opt.tfcheck or opt.tfcheck_all):
        return
    from tfcheck.model import declarations as decl
    from tfcheck.model.project_config import find_pyproject, models_to_run, unique_specs
    from tfcheck.model.spec import split_spec

    try:
        cli = dict(decl.parse_assignment(text, "--tfcheck-set") for text in opt.tfcheck_set)
        pyproject = find_pyproject(config.rootpath)
        given, repeated = unique_specs(list(opt.tfcheck))
        if repeated:
            config.issue_config_time_warning(pytest.PytestConfigWarning(
                f"tfcheck: --tfcheck {', '.join(sorted(set(repeated)))} given more than once: checked once"), 2)
        specs = models_to_run(given, pyproject, include_all=opt.tfcheck_all)
        if opt.tfcheck_all and len(specs) == len(given):
            raise TfcheckError(f"--tfcheck-all: no [[tool.tfcheck.models]] entries in "
                               f"{pyproject or 'pyproject.toml (none found)'}")
        for entry in specs:
            split_spec(entry.spec)
    except TfcheckError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt.tfcheck_json == "":
        raise pytest.UsageError("--tfcheck-json needs a PATH (--tfcheck-json report.json)")
    if opt.tfcheck_images and not opt.tfcheck_json:
        raise pytest.UsageError("--tfcheck-images draws the leak maps beside the JSON report: give --tfcheck-json PATH")
    json_path = None
    if opt.tfcheck_json:
        from tfcheck.ui.io import writable_path

        try:
            json_path = writable_path(opt.tfcheck_json, "--tfcheck-json")  # refused before any item runs
        except TfcheckError as exc:
            raise pytest.UsageError(str(exc)) from None
    state = PluginState(specs, cli, opt.tfcheck_strict, json_path,
                        config.invocation_params.dir, opt.tfcheck_images)
    state.format = opt.tfcheck_format
    config.stash[STATE] = state
    config.addinivalue_line("markers", "tfcheck: a tfcheck battery item")
    config.pluginmanager.register(TfcheckSession(state, config), "tfcheck-session")


class TfcheckSession:
    """The hooks that only matter when tfcheck runs, registered by pytest_configure in that case only."""

    def __init__(self, state: PluginState, config: pytest.Config):
        self.state = state
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list) -> None:
        # tryfirst: the items must exist before -k / -m deselection runs in pytest's own hook.
        for entry in self.state.specs:
            name = f"tfcheck[{entry.name or entry.spec}]"
            node = TfcheckModel.from_parent(session, name=name, nodeid=name, spec=entry.spec, declared=entry.declared,
                                            label=entry.label)
            items.extend(session.genitems(node))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After -k / -m deselection: a model whose forward.smoke item was deselected must not hide a broken
        # forward behind "blocked" skips, so its other items fail with the explanation instead.
        selected: dict[TfcheckModel, bool] = {}
        for item in session.items:
            if isinstance(item, TfcheckItem):
                parent = cast(TfcheckModel, item.parent)  # pytest types it Node | None; an item's is its model
                selected[parent] = selected.get(parent, False) or item.check.id == "forward.smoke"
        for model, smoke_selected in selected.items():
            assert model.runner is not None  # collect() built it before yielding the items
            model.runner.smoke_reported = smoke_selected

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        # An attribute of the report survives xdist's serialisation (and stays out of --junitxml).
        if isinstance(item, TfcheckItem) and call.when == "call" and item.payload is not None:
            report.tfcheck_payload = item.payload
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "tfcheck_payload", None)
        if payload is not None:
            self.state.results.append(json.loads(payload))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.state.results:
            return
        from tfcheck.ui.render import summary_view, to_string

        text = to_string(summary_view(_report(self.state)), width=terminalreporter._tw.fullwidth,
                         color=terminalreporter.hasmarkup)
        terminalreporter.write_sep("=", "tfcheck summary")
        terminalreporter.write(text)
        if self.state.format == "github":
            from tfcheck.ui.annotations import github_annotations

            for line in github_annotations(_report(self.state), workspace=None):
                terminalreporter.write_line(line)  # unwrapped: GitHub reads each command from its own line

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.state.json_path is None or hasattr(self.config, "workerinput"):
            return
        report = _report(self.state)
        from tfcheck.ui.io import write_report

        try:
            write_report(self.state.json_path, report.to_json(), "--tfcheck-json")
        except TfcheckError as exc:
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"tfcheck: error: {exc}", red=True)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        if self.state.images:
            from tfcheck.ui.leakmap import save_images

            save_images(report, self.state.json_path.with_suffix(""))


def _report(state: PluginState):
    """The report rebuilt from the items' payloads, in battery order (xdist may deliver them in any order)."""
    from tfcheck.engine.battery import all_checks
    from tfcheck.engine.symptoms import symptom_checks
    from tfcheck.report import root_cause
    from tfcheck.report.findings import Finding
    from tfcheck.report.report import Assumption, CheckResult, Cost, ModelReport, Report

    order = {c.id: i for i, c in enumerate(all_checks())}
    models: dict[str, ModelReport] = {}
    for payload in state.results:
        spec = payload["spec"]
        m = models.setdefault(spec, ModelReport(spec, [Assumption(**a) for a in payload["assumptions"]]))
        r = payload["result"]
        m.results.append(CheckResult(r["check"], r["title"], [Finding.from_dict(f) for f in r["findings"]],
                                     Cost(**r["cost"]), r["seconds"]))
    for m in models.values():
        m.results.sort(key=lambda r: order.get(r.check, len(order)))
        root_cause.link(m, symptom_checks())
    specs = [entry.label for entry in state.specs]
    return Report(sorted(models.values(), key=lambda m: specs.index(m.spec) if m.spec in specs else len(specs)))


class TfcheckModel(pytest.Collector):
    """One model: loads it once and yields one item per applicable check."""

    def __init__(self, *, spec: str, declared: dict, label: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec
        self.declared = declared
        self.label = label or spec
        self.runner: Runner | None = None  # built by collect()

    def collect(self):
        from tfcheck.engine.runner import Runner, applicable_checks, load_subject, may_apply_after_trial
        from tfcheck.model import declarations as decl

        state = self.config.stash[STATE]
        try:
            subject = load_subject(self.spec, decl.merge(state.cli, self.declared), base=state.invocation_dir)
            checks = applicable_checks(subject)
        except TfcheckError as exc:
            raise TfcheckLoadError(str(exc)) from None
        subject.loaded.spec = self.label  # one spec listed twice (two sizes) is told apart by its name
        self.runner = Runner(subject)
        # Collection runs no forward, but a fact the trial forward settles (a padding mask built inside) may make
        # a check apply: such a check is an item too, skipped with its reason if it still does not apply, so
        # that pytest runs what tfcheck check runs.
        later = {c.id for c in may_apply_after_trial(subject, checks)}
        for chk in all_checks_in_order(checks, later):
            item = TfcheckItem.from_parent(self, name=chk.id, check=chk, late=chk.id in later)
            item.add_marker("tfcheck")
            yield item

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, TfcheckLoadError):
            return f"tfcheck cannot load model {self.label}: {excinfo.value}"
        return super().repr_failure(excinfo)


class TfcheckItem(pytest.Item):
    """One check on one model."""

    def __init__(self, *, check: Check, late: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check
        self.late = late  # not applicable before the trial forward; it may be after
        self.payload: str | None = None

    def runtest(self) -> None:
        from tfcheck.report.status import Status

        model = cast(TfcheckModel, self.parent)  # pytest types it Node | None; an item's parent is its model
        assert model.runner is not None  # collect() built it before yielding this item
        if self.late and model.runner.late_reason(self.check) is not None:
            raise pytest.skip.Exception(f"not applicable: {model.runner.late_reason(self.check)}",
                                        _use_item_location=True)
        result = model.runner.result(self.check)
        self.payload = json.dumps({
            "spec": model.label, "assumptions": [a.to_dict() for a in model.runner.subject.assumptions],
            "result": result.to_dict()}, ensure_ascii=False)
        status = result.status
        if status in (Status.FAIL, Status.ERROR) or (status is Status.WARN and self.config.stash[STATE].strict):
            raise TfcheckFailure(result)
        for f in result.findings:
            if f.status is Status.WARN:
                warnings.warn(TfcheckWarning(f"{model.spec} {f.check}: {f.message}"), stacklevel=1)
        if status is Status.SKIP:
            # Reported at the item (the model spec), not at this line of the plugin.
            raise pytest.skip.Exception("; ".join(f.message for f in result.findings if f.status is Status.SKIP),
                                        _use_item_location=True)

    def repr_failure(self, excinfo, style=None):
        if not isinstance(excinfo.value, TfcheckFailure):
            return super().repr_failure(excinfo)
        from tfcheck.report.status import Status
        from tfcheck.ui.render import render_finding

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        width = reporter._tw.fullwidth if reporter is not None else 100
        bad = [f for f in excinfo.value.result.findings if f.status in (Status.FAIL, Status.ERROR, Status.WARN)]
        return "".join(render_finding(f, width=width) for f in bad)

    def reportinfo(self):
        return self.parent.spec, 0, f"tfcheck {self.parent.spec}::{self.check.id}"


def all_checks_in_order(checks: list[Check], later: set[str]) -> list[Check]:
    """The checks that apply and those that may after the trial, in battery order."""
    from tfcheck.engine.battery import all_checks

    chosen = {c.id for c in checks} | later
    return [c for c in all_checks() if c.id in chosen]
