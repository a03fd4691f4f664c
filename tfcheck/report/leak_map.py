"""Leak maps as data: where an information-flow check saw a change it did not allow, a grid of measured changes
with a role per cell, its text form and its JSON evidence (the views are in ``tfcheck.ui.leakmap``).

The roles of a cell:
- ``forbidden``: no change allowed (a later key for a causal model); above the tolerance it is a leak;
- ``allowed``: change expected (the past, the present);
- ``pad``: a padded position, whose own output is not judged;
- ``real``: a real token's output, which must not change when only padding changed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: (cell role, changed?) -> glyph of the text map
GLYPHS = {("forbidden", True): "X", ("forbidden", False): ".", ("allowed", True): "o", ("allowed", False): " ",
          ("real", True): "X", ("real", False): ".", ("pad", True): "_", ("pad", False): "_"}
LEGEND = {"causal": "X = leak (changed where it must not), . = unchanged future, o = past/present (may change), "
                    "? = output not finite",
          "padding": "X = real token changed by padding content (leak), . = real token unchanged, _ = pad"}



@dataclass
class LeakMap:
    """Measured changes per (row, column) with the tolerance they were judged by."""

    kind: str  # "causal" (rows: query position, columns: perturbed key position) or "padding"
    title: str
    row_labels: list[str]
    column_labels: list[str]
    values: list[list[float]]
    roles: list[list[str]]
    tolerance: float

    def leaked(self, i: int, j: int) -> bool:
        return self.roles[i][j] in ("forbidden", "real") and self.values[i][j] > self.tolerance

    @property
    def leaks(self) -> int:
        return sum(self.leaked(i, j) for i in range(len(self.values)) for j in range(len(self.values[i])))

    def glyph(self, i: int, j: int) -> str:
        value = self.values[i][j]
        return "?" if value != value else GLYPHS[(self.roles[i][j], value > self.tolerance)]  # ? = NaN: not measured

    def header(self) -> list[str]:
        """Column indices, one digit per column: the last digit where the columns are every position in
        order (0123456789012...), else the whole index written downwards, so that k15 never reads as k5."""
        indices = [c.lstrip("kq") for c in self.column_labels]
        if indices == [str(j) for j in range(len(indices))] or not all(i.isdigit() for i in indices):
            return ["".join(c[-1] for c in self.column_labels)]
        places = max(len(i) for i in indices)
        return ["".join(i.rjust(places)[p] for i in indices) for p in range(places)]

    def text(self) -> str:
        """The map as lines of glyphs, a header of column indices, and the legend."""
        width = max(len(r) for r in self.row_labels)
        lines = [self.title, *(" " * (width + 1) + line for line in self.header())]
        for i, label in enumerate(self.row_labels):
            cells = "".join(self.glyph(i, j) for j in range(len(self.values[i])))
            lines.append(f"{label:>{width}} {cells}")
        lines.append(LEGEND[self.kind] + f"; tolerance {self.tolerance:.3g}")
        return "\n".join(lines)

    def to_evidence(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "rows": self.row_labels, "columns": self.column_labels,
                "values": [[float(f"{v:.3g}") for v in row] for row in self.values], "roles": self.roles,
                "tolerance": self.tolerance}

    @classmethod
    def from_evidence(cls, data: dict[str, Any]) -> LeakMap:
        return cls(data["kind"], data["title"], list(data["rows"]), list(data["columns"]),
                   [[float(v) for v in row] for row in data["values"]], [list(r) for r in data["roles"]],
                   float(data["tolerance"]))


def evidence_of(leak_map: LeakMap) -> dict[str, Any]:
    """The two evidence entries of a map: the text (what the terminal shows) and the data (JSON, images)."""
    return {"leak_map": leak_map.text(), "leak_map_data": leak_map.to_evidence()}
