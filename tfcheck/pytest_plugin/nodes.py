"""The plugin's collectors and items: a model loads once, at collection, and yields one item per check.

A model hangs under its anchor file (``TfcheckFile``, items named ``tfcheck[LABEL]::CHECK``) or, when it has
none below the rootdir, under a rootless ``TfcheckModel`` collector named ``tfcheck[LABEL]`` (items named
``CHECK``; tfcheck.pytest_plugin.anchors says why).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

import pytest

from tfcheck.errors import TfcheckError
from tfcheck.pytest_plugin.anchors import PREFIX, label_of, rerun_command
from tfcheck.pytest_plugin.failure_repr import FailureRepr, crash_line, short_text, shown_findings
from tfcheck.pytest_plugin.state import STATE
from tfcheck.pytest_plugin.verdicts import (
    AS_ERROR,
    TfcheckFailure,
    TfcheckLoadError,
    TfcheckWarning,
    failure,
    warn_at_model,
    where,
)
from tfcheck.pytest_plugin.workers import thread_share

if TYPE_CHECKING:
    from tfcheck.engine.registry import Check
    from tfcheck.engine.runner import Runner
    from tfcheck.model.facts.project_config import Entry


class ModelNode:
    """What the two model collectors share: the entry, the loaded runner, and the items."""

    entry: Entry
    load_spec: str  # the spec to load (a path spec read from the anchor file)
    item_prefix: str  # prepended to a check id to name its item
    rerunnable: bool  # its items' ids can be given back to pytest
    runner: Runner | None
    error: str | None  # why the model could not even be looked up (a pasted id naming no entry)
    config: pytest.Config

    @property
    def label(self) -> str:
        return self.entry.label

    @property
    def location(self) -> str:
        """What a warning or a failure without a line of its own points at."""
        return self.load_spec

    def model_items(self) -> Any:
        from tfcheck.battery import all_checks
        from tfcheck.engine.runner import Runner, applicable_checks, load_subject, may_apply_after_trial
        from tfcheck.model.facts import declarations as decl

        all_checks()  # the engine runs the battery its front end loads
        if self.error is not None:
            raise TfcheckLoadError(self.error)
        state = self.config.stash[STATE]
        try:
            subject = load_subject(self.load_spec, decl.merge(state.cli, self.entry.declared),
                                   base=state.invocation_dir)
            checks = applicable_checks(subject)
        except TfcheckError as exc:
            raise TfcheckLoadError(str(exc)) from None
        subject.loaded.spec = self.label  # one spec listed twice (two sizes) is told apart by its name
        self.runner = Runner(subject)
        # Collection runs no forward, but a fact the trial forward settles (a padding mask built inside) may make
        # a check apply: such a check is an item too, skipped with its reason if it still does not apply, so
        # that pytest runs what tfcheck check runs.
        later = {c.id for c in may_apply_after_trial(subject, checks)}
        xdist = self.config.pluginmanager.hasplugin("xdist")
        for chk in all_checks_in_order(checks, later):
            item = TfcheckItem.from_parent(cast(pytest.Collector, self), name=self.item_prefix + chk.id, check=chk,
                                           late=chk.id in later)
            item.add_marker("tfcheck")
            item.add_marker(f"tfcheck_{chk.group}")
            if xdist:  # --dist loadgroup sends a model's items to one worker: its forwards run there only
                item.add_marker(pytest.mark.xdist_group(self.label))
            yield item

    def load_failure(self, excinfo) -> str | None:
        if isinstance(excinfo.value, TfcheckLoadError):
            return f"tfcheck cannot load model {self.label}: {excinfo.value}"
        return None


class TfcheckFile(ModelNode, pytest.File):
    """A model under its anchor file: ``model.py::tfcheck[model.py:GPT]::CHECK``."""

    def __init__(self, *, entry: Entry, load_spec: str, error: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entry, self.load_spec, self.error = entry, load_spec, error
        self.item_prefix = f"{PREFIX}{label_of(entry)}]::"
        self.rerunnable = True
        self.runner = None

    @property
    def location(self) -> str:
        return str(self.path)

    def collect(self):
        return self.model_items()

    def repr_failure(self, excinfo, style=None):
        return self.load_failure(excinfo) or super().repr_failure(excinfo, style)


class TfcheckModel(ModelNode, pytest.Collector):
    """A model with no anchor file below the rootdir: ``tfcheck[LABEL]::CHECK``, whose failures print a rerun."""

    def __init__(self, *, entry: Entry, load_spec: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entry, self.load_spec, self.error = entry, load_spec, None
        self.item_prefix = ""
        self.rerunnable = False
        self.runner = None

    def collect(self):
        return self.model_items()

    def repr_failure(self, excinfo, style=None):
        return self.load_failure(excinfo) or super().repr_failure(excinfo, style)


class TfcheckItem(pytest.Item):
    """One check on one model."""

    def __init__(self, *, check: Check, late: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check
        self.late = late  # not applicable before the trial forward; it may be after
        self.payload: str | None = None

    @property
    def model(self) -> ModelNode:
        return cast(ModelNode, self.parent)  # pytest types it Node | None; an item's parent is its model

    def runtest(self) -> None:
        with thread_share(self.config):  # a worker's share of the cores under xdist (workers.py says why)
            self._run()

    def _run(self) -> None:
        from tfcheck.engine.runner import SMOKE
        from tfcheck.report.status import Status

        model = self.model
        runner = model.runner
        assert runner is not None  # collect() built it before yielding this item
        settings = self.config.stash[STATE].settings
        if self.late and runner.late_reason(self.check) is not None:
            raise pytest.skip.Exception(f"not applicable: {runner.late_reason(self.check)}", _use_item_location=True)
        result = runner.result(self.check)
        self.payload = json.dumps({
            "spec": model.label, "assumptions": [a.to_dict() for a in runner.subject.assumptions],
            "result": result.to_dict()}, ensure_ascii=False)
        # The documented JUnit <property name="tfcheck">: the check's result as JSON (also through xdist).
        self.user_properties.append(("tfcheck", json.dumps({"spec": model.label, **result.to_dict()},
                                                           ensure_ascii=False)))
        failed = failure(result, runner.smoke() if self.check.id != SMOKE else None, runner.subject,
                         strict=settings.strict, smoke_reported=runner.smoke_reported)
        if failed is not None:
            raise failed
        try:
            warn_at_model(model.label, result, runner.subject.loaded.origin, model.location)
        except TfcheckWarning:  # -W error: a clean failure of this item, never a crash of the run
            raise TfcheckFailure(result, AS_ERROR) from None
        self.add_report_section("call", "tfcheck", "".join(short_text(f) for f in result.findings))
        if result.status is Status.SKIP:
            # Reported at the item (the model spec), not at this line of the plugin.
            raise pytest.skip.Exception("; ".join(f.message for f in result.findings if f.status is Status.SKIP),
                                        _use_item_location=True)

    def repr_failure(self, excinfo, style=None):
        if not isinstance(excinfo.value, TfcheckFailure):
            return super().repr_failure(excinfo)
        failed = excinfo.value
        findings = shown_findings(failed.result.findings)
        model = self.model
        rerun = None
        if not model.rerunnable:
            rerun = rerun_command(model.entry, self.check.id, self.config.stash[STATE].settings.declarations)
        origin = model.runner.subject.loaded.origin if model.runner is not None else None
        crash = crash_line(findings[0], where(findings[0], origin, model.location))
        return FailureRepr(findings, self.config.getoption("tbstyle", "auto"), crash, failed.reason, rerun)

    def reportinfo(self):
        model = self.model
        return model.location, 0, f"tfcheck {model.label}::{self.check.id}"


def all_checks_in_order(checks: list[Check], later: set[str]) -> list[Check]:
    """The checks that apply and those that may after the trial, in battery order."""
    from tfcheck.battery import all_checks

    chosen = {c.id for c in checks} | later
    return [c for c in all_checks() if c.id in chosen]
