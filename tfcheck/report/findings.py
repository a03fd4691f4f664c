"""A finding: one verdict of one check, with the evidence it was judged by."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tfcheck.frames import short_path
from tfcheck.report.status import Status


@dataclass(frozen=True)
class Location:
    """Where a finding points: a module path inside the model and, where known, the user's source line.

    ``reason`` says why a location is less precise than a file and line (an instance's construction line is
    unknown; the measurement localises to the whole model), so a reader never wonders whether it was looked for.
    """

    module: str | None = None
    file: str | None = None
    line: int | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        # Checks name files as the recorder, the traceback or inspect saw them; one spelling (relative to the
        # working directory when below it) lets a reader paste it and the root-cause relation compare lines.
        if self.file:
            object.__setattr__(self, "file", short_path(self.file))

    @property
    def installed(self) -> bool:
        """The line lies in an installed package (site-packages), outside the user's workspace: CI hosts such as
        GitHub drop annotations there, so the report says it."""
        return bool(self.file) and "site-packages" in str(self.file)

    def __str__(self) -> str:
        parts = []
        if self.module is not None:
            parts.append(f"module '{self.module or '<root>'}'")
        if self.file:
            parts.append(f"{self.file}:{self.line}" if self.line else self.file)
        text = " at ".join(parts) if parts else "<unknown>"
        if self.installed:
            text += " (an installed package, outside your workspace)"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "installed": self.installed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Location:
        return cls(data.get("module"), data.get("file"), data.get("line"), data.get("reason"))


@dataclass(frozen=True)
class Related:
    """A line that belongs to a finding's story besides its location: where the mask is built, where it is
    applied, where the scores are computed, the schedule's function."""

    role: str
    file: str | None
    line: int | None
    module: str | None = None

    def __post_init__(self) -> None:
        if self.file:
            object.__setattr__(self, "file", short_path(self.file))

    def __str__(self) -> str:
        at = f"{self.file}:{self.line}" if self.file and self.line else (self.file or "<unknown>")
        return f"{self.role}: {at}" + (f" (module '{self.module or '<root>'}')" if self.module is not None else "")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Finding:
    """One verdict. ``evidence`` holds the numbers measured and the tolerance they were judged by;
    ``row`` is the id of the troubleshooting-table row that explains a failure."""

    check: str
    status: Status
    message: str
    location: Location | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    row: str | None = None
    related: tuple[Related, ...] = ()
    #: The check whose finding causes this one (set when the report is assembled, on evidence only; see
    #: tfcheck.report.root_cause). It never changes a status.
    explained_by: str | None = None

    def with_status(self, status: Status, message: str | None = None) -> Finding:
        return dataclasses.replace(self, status=status, message=message or self.message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status.value,
            "message": self.message,
            "location": self.location.to_dict() if self.location else None,
            "evidence": to_jsonable(self.evidence),
            "row": self.row,
            "related": [r.to_dict() for r in self.related],
            "explained_by": self.explained_by,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        loc = data.get("location")
        return cls(
            check=data["check"],
            status=Status(data["status"]),
            message=data["message"],
            location=Location.from_dict(loc) if loc else None,
            evidence=dict(data.get("evidence") or {}),
            row=data.get("row"),
            related=tuple(Related(**r) for r in data.get("related") or ()),
            explained_by=data.get("explained_by"),
        )


def to_jsonable(value: Any) -> Any:
    """Evidence may hold tuples, torch.Size, numpy scalars; JSON wants lists and plain numbers."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (str, bool, int, type(None))):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return to_jsonable(value.item())
    return str(value)
