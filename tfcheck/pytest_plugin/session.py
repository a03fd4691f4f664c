"""The hooks that only matter when tfcheck items exist: registered by ``pytest_configure`` in that case only."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfcheck.errors import TfcheckError
from tfcheck.pytest_plugin.anchors import (
    PREFIX,
    Requested,
    anchor_for,
    label_of,
    loading_spec,
    requested_entry,
)
from tfcheck.pytest_plugin.nodes import ModelNode, TfcheckFile, TfcheckItem, TfcheckModel
from tfcheck.pytest_plugin.state import PluginState


class TfcheckSession:
    def __init__(self, state: PluginState, config: pytest.Config):
        self.state = state
        self.config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector):
        found = yield
        wanted = [r for r in self.state.requested if r.path == file_path]
        if not wanted:
            return found
        if file_path not in self.state.plain_paths:  # named by tfcheck ids only: not imported as a test module
            found = [c for c in found if not isinstance(c, pytest.Module)]
        return [*found, *(self._requested_node(parent, r) for r in wanted)]

    def _requested_node(self, parent: pytest.Collector, wanted: Requested) -> TfcheckFile:
        from tfcheck.model.facts.project_config import Entry

        try:
            entry = requested_entry(wanted, self.state.pyproject)
        except TfcheckError as exc:  # shown as this file's collection error, with the message only
            return TfcheckFile.from_parent(parent, path=wanted.path, entry=Entry(wanted.label, {}),
                                           load_spec=wanted.label, error=str(exc))
        self._order(entry.label)
        return TfcheckFile.from_parent(parent, path=wanted.path, entry=entry, load_spec=loading_spec(
            entry, wanted.path, self.state.pyproject, self.state.invocation_dir))

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, items: list) -> None:
        # tryfirst: the items must exist before -k / -m deselection runs in pytest's own hook.
        pasted = {(r.path, r.label) for r in self.state.requested}
        for entry, by_pyproject in self.state.listed:
            anchor = anchor_for(entry, by_pyproject, self.state.pyproject, self.state.invocation_dir,
                                self.config.rootpath)
            if anchor is not None and (anchor, label_of(entry)) in pasted:
                continue  # collected from its file, as the pasted id asked
            self._order(entry.label)
            node: pytest.Collector
            if anchor is None:
                name = f"{PREFIX}{label_of(entry)}]"
                node = TfcheckModel.from_parent(session, name=name, nodeid=name, entry=entry, load_spec=entry.spec)
            else:
                node = TfcheckFile.from_parent(session, path=anchor, entry=entry, load_spec=entry.spec)
            items.extend(session.genitems(node))

    def _order(self, label: str) -> None:
        if label not in self.state.labels:
            self.state.labels.append(label)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After -k / -m deselection: a model whose forward.smoke item was deselected must not hide a broken
        # forward behind "blocked" skips, so its other items fail with the explanation instead.
        from tfcheck.engine.runner import SMOKE

        selected: dict[ModelNode, bool] = {}
        for item in session.items:
            if isinstance(item, TfcheckItem):
                selected[item.model] = selected.get(item.model, False) or item.check.id == SMOKE
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

        text = to_string(summary_view(rebuilt_report(self.state)), width=terminalreporter._tw.fullwidth,
                         color=terminalreporter.hasmarkup)
        terminalreporter.write_sep("=", "tfcheck summary")
        terminalreporter.write(text)
        if self.state.format == "github":
            from tfcheck.ui.annotations import github_annotations

            for line in github_annotations(rebuilt_report(self.state), workspace=None):
                terminalreporter.write_line(line)  # unwrapped: GitHub reads each command from its own line

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.state.json_path is None or hasattr(self.config, "workerinput"):
            return
        report = rebuilt_report(self.state)
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


def rebuilt_report(state: PluginState):
    """The report rebuilt from the items' payloads, in battery order (xdist may deliver them in any order)."""
    from tfcheck.battery import all_checks
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
    # On an xdist controller nothing was collected: the listed models give the order there.
    labels = state.labels or [entry.label for entry, _ in state.listed]
    return Report(sorted(models.values(), key=lambda m: labels.index(m.spec) if m.spec in labels else len(labels)))

