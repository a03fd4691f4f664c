"""A finding: one verdict of one check, with the evidence it was judged by."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tfcheck.report.status import Status


@dataclass(frozen=True)
class Location:
    """Where a finding points: a module path inside the model and, where known, the user's source line."""

    module: str | None = None
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        parts = []
        if self.module is not None:
            parts.append(f"module '{self.module or '<root>'}'")
        if self.file:
            parts.append(f"{self.file}:{self.line}" if self.line else self.file)
        return " at ".join(parts) if parts else "<unknown>"

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
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        loc = data.get("location")
        return cls(
            check=data["check"],
            status=Status(data["status"]),
            message=data["message"],
            location=Location(**loc) if loc else None,
            evidence=dict(data.get("evidence") or {}),
            row=data.get("row"),
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
