"""The report: findings collected per model and per check, serialisable to the documented JSON schema."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tfcheck.report.findings import Finding, to_jsonable
from tfcheck.report.status import Status, worst

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

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": to_jsonable(self.value), "source": self.source}


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
        }


@dataclass
class ModelReport:
    spec: str
    assumptions: list[Assumption] = field(default_factory=list)
    results: list[CheckResult] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return worst(r.status for r in self.results)

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
            "assumptions": [a.to_dict() for a in self.assumptions],
            # what to fix first: the checks with a problem that no other finding explains (report.root_cause)
            "root_causes": list(dict.fromkeys(f.check for f in self.findings()
                                              if f.status in PROBLEMS and f.explained_by is None)),
            "checks": [r.to_dict() for r in self.results],
        }


@dataclass
class Report:
    models: list[ModelReport] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def status(self) -> Status:
        return worst(m.status for m in self.models)

    def failed(self, strict: bool = False) -> bool:
        bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if strict else set())
        return any(f.status in bad for m in self.models for f in m.findings())

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
        from tfcheck.ui.render import render_text

        return render_text(self)
