"""Every hint tfcheck can print, read from its source, and the hints a report prints, read from the report.

A hint is a declaration tfcheck tells the user to make: ``declare kind=encoder``, ``--set 'kwargs={...}'``,
``(or precision=fp32)``, ``declare 'output'``. Its identity is the declaration as the source writes it, with
each f-string field written ``{}`` (``mask={}:pad``) and a JSON value written ``JSON``: the same text printed by
two call sites is one hint. The catalogue is derived from tfcheck's string literals and f-strings, never kept
by hand, so a new message with a hint shows up in tests/corpus/test_hints.py until a test follows it."""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tfcheck.model.facts.declarations import KEYS

ROOT = Path(__file__).resolve().parents[2]
FIELD = "{}"  # an f-string's interpolated part, in a hint's id
JSON = "JSON"  # a quoted JSON value (kwargs, extra, accept), whose text is the user's own
#: What introduces a hint; "or" is the alternative of one ("declare precision=fp16 ..., or precision=fp32").
LEAD = r"(?:[Dd]eclare|--set|--tfcheck-set|\bor|\(or|\(e\.g\.) '?"
ASSIGNED = re.compile(LEAD + r"([a-z_]+)=('\{.*?\}'|\{[^}].*?\}|[^\s,;)'\"`]*)")
#: "declare 'output'", "declare pad_id", "declare a larger train_steps": a key named without its value.
BARE = re.compile(r"[Dd]eclare (?:a larger |the )?'?([a-z_]+)'?(?![=a-z_])")


@dataclass(frozen=True)
class Hint:
    key: str
    value: str  # as written: a literal, placeholders (ARG:CONVENTION), {} fields, JSON; "" for a bare key

    @property
    def id(self) -> str:
        return f"{self.key}={self.value}" if self.value else self.key

    def matches(self, printed: Hint) -> bool:
        """Whether a printed hint is this one filled in (its {} fields given values)."""
        if printed.key != self.key:
            return False
        pattern = ".+?".join(re.escape(part) for part in self.value.split(FIELD))
        return re.fullmatch(pattern, printed.value) is not None


def normal(key: str, value: str) -> Hint:
    value = value.rstrip(".,;:")
    if value.startswith("'") or '"' in value or (value.startswith("{") and not value.startswith(FIELD)):
        value = JSON
    return Hint(key, value)


def hints_in(text: str) -> Iterator[Hint]:
    for key, value in ASSIGNED.findall(text):
        if key in KEYS:
            yield normal(key, value)
    for key in BARE.findall(text):
        if key in KEYS:
            yield Hint(key, "")


def literal_text(node: ast.AST) -> str | None:
    """A string literal's text, or an f-string's with each field as {} (so its hint keeps its shape)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else FIELD for part in node.values)
    return None


def source_hints() -> dict[str, list[str]]:
    """Hint id -> the places in tfcheck/ that write it (file:line)."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tfcheck").rglob("*.py")):
        tree = ast.parse(path.read_text())
        # an f-string's own pieces are read with it, not again on their own
        pieces = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            text = None if id(node) in pieces else literal_text(node)
            for hint in hints_in(text or ""):
                found.setdefault(hint.id, []).append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
    # the troubleshooting rows' fixes are printed under the findings that name them
    for path in sorted((ROOT / "tfcheck" / "data").rglob("*.toml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for hint in hints_in(line):
                found.setdefault(hint.id, []).append(f"{path.relative_to(ROOT)}:{number}")
    return found


def source_hint(hint_id: str) -> Hint:
    key, _, value = hint_id.partition("=")
    return Hint(key, value)


def report_text(report) -> str:
    """Every string a report holds (messages, assumption sources, ...), one a line: what a user can read."""
    def strings(value) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, list | tuple):
            for item in value:
                yield from strings(item)
    return "\n".join([str(report), *strings(report.to_dict())])

