"""The report: findings collected per model and per check, serialisable to the documented JSON schema."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tfcheck.display import rich_view, text_view
from tfcheck.report.findings import Finding, to_jsonable
from tfcheck.report.status import Status, worst
from tfcheck.report.verdict import Verdict, verdict

#: The statuses that are problems: what a root cause is chosen among.
PROBLEMS = (Status.FAIL, Status.ERROR, Status.WARN)

#: Bump when the JSON layout changes incompatibly; docs/report-schema.md documents each version.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Assumption:
    """A fact tfcheck used about the model, and where it came from (a declaration, the config, a guess)."""

    key: str
    value: Any
    source: str
    #: the user declared it (``__tfcheck__``, ``--set``, pyproject.toml, a keyword argument): not a guess
    declared: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": to_jsonable(self.value), "source": self.source, "declared": self.declared}


@dataclass
class Cost:
    """What a check spent: model passes, and token-passes (batch x length summed over its passes)."""

    forward: int = 0
    backward: int = 0
    token_passes: int = 0
    reused: int = 0  # probes another check of the same model had already run (charged to that one)

    def to_dict(self) -> dict[str, int]:
        return {"forward": self.forward, "backward": self.backward, "token_passes": self.token_passes,
                "reused": self.reused}


@dataclass
class CheckResult:
    check: str
    title: str
    findings: list[Finding]
    cost: Cost = field(default_factory=Cost)
    seconds: float = 0.0
    #: the facts the check read while it ran (tfcheck.model.facts.facts): the assumptions its verdict depends on
    reads: list[str] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return worst(f.status for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "title": self.title,
            "status": self.status.value,
            "findings": [f.to_dict() for f in self.findings],
            "cost": self.cost.to_dict(),
            "seconds": round(self.seconds, 4),
            "reads": list(self.reads),
        }


@dataclass
class ModelReport:
    spec: str
    assumptions: list[Assumption] = field(default_factory=list)
    results: list[CheckResult] = field(default_factory=list)

    @property
    def status(self) -> Status:
        """The headline status (tfcheck.report.verdict): inconclusive checks beside passes head no SKIP."""
        return self.verdict.status

    @property
    def verdict(self) -> Verdict:
        return verdict(self.results, overrun_fails=self.budget_overrun == "fail")

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.results)

    @property
    def budget_overrun(self) -> str:
        """What a check of this model stopped by its budget counts as: its ``budget_overrun`` declaration (the CLI's
        --budget-overrun and --strict declare it for every model), else "skip"."""
        return str(next((a.value for a in self.assumptions if a.key == "budget_overrun"), "skip"))

    def result(self, check_id: str) -> CheckResult:
        for r in self.results:
            if r.check == check_id:
                return r
        raise KeyError(f"no result for check {check_id!r} in the report of {self.spec}")

    def findings(self) -> Iterator[Finding]:
        for r in self.results:
            yield from r.findings

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "status": self.status.value,
            "headline": self.verdict.headline,
            "counts": self.verdict.to_dict(),
            "assumptions": [a.to_dict() for a in self.assumptions],
            # what to fix first: the checks with a problem that no other finding explains (report.root_cause)
            "root_causes": list(dict.fromkeys(f.check for f in self.findings()
                                              if f.status in PROBLEMS and f.explained_by is None)),
            "checks": [r.to_dict() for r in self.results],
        }

    def __repr__(self) -> str:
        """One line: ``<ModelReport reference_model:TransformerLM: PASS 20 passed, 0 warnings>``."""
        text = f"{self.spec}: {self.verdict.headline} {self.verdict.counts_text()}"
        return f"<ModelReport {' '.join(text.split())}>"  # a reason with a line break stays on the line

    def __rich__(self):
        return Report(models=[self]).__rich__()

    def _repr_html_(self) -> str:  # a notebook shows the text report
        return Report(models=[self])._repr_html_()


@dataclass
class Report:
    models: list[ModelReport] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def status(self) -> Status:
        return worst(m.status for m in self.models)

    def failed(self, strict: bool = False) -> bool:
        """A failure or an error (with ``strict``, a warning too); a check stopped by its budget counts as a failure
        where the model's ``budget_overrun`` is "fail" (tfcheck.report.verdict)."""
        bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if strict else set())
        return any(f.status in bad for m in self.models for f in m.findings()) or any(
            m.verdict.status is Status.FAIL for m in self.models)

    def to_dict(self) -> dict[str, Any]:
        from tfcheck.version import __version__

        return {
            "schema_version": self.schema_version,
            "tfcheck_version": __version__,
            "status": self.status.value,
            "models": [m.to_dict() for m in self.models],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def __str__(self) -> str:
        return text_view(self)

    def __repr__(self) -> str:
        """One line, whatever the number of models: ``<Report reference_model:TransformerLM: PASS 20 passed,
        0 warnings>``; with several, the overall status and each model's headline (the first few)."""
        shown_models = 3
        lines = [" ".join(f"{m.spec}: {m.verdict.headline} {m.verdict.counts_text()}".split()) for m in self.models]
        if len(lines) == 1:
            return f"<Report {lines[0]}>"
        if not lines:
            return "<Report: no models>"
        shown = "; ".join(lines[:shown_models]) + (f"; and {len(lines) - shown_models} more"
                                                   if len(lines) > shown_models else "")
        return f"<Report {self.status.value.upper()}, {len(lines)} models: {shown}>"

    def __rich__(self):
        return rich_view(self)

    def _repr_html_(self) -> str:  # a notebook shows the text report
        import html

        return f"<pre>{html.escape(str(self))}</pre>"
