"""The troubleshooting table, read from the package data file ``data/table.toml``."""
from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Row:
    id: str
    symptom: str
    causes: tuple[str, ...]
    fixes: tuple[str, ...]
    checks: tuple[str, ...]
    patterns: tuple[str, ...]
    source: str
    symptom_zh: str
    causes_zh: tuple[str, ...]
    fixes_zh: tuple[str, ...]

    def text(self, lang: str = "en") -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """(symptom, causes, fixes) in ``lang`` ('en' or 'zh')."""
        if lang == "zh":
            return self.symptom_zh, self.causes_zh, self.fixes_zh
        return self.symptom, self.causes, self.fixes

    def to_dict(self) -> dict:
        return {
            "id": self.id, "symptom": self.symptom, "causes": list(self.causes), "fixes": list(self.fixes),
            "checks": list(self.checks), "source": self.source,
            "symptom_zh": self.symptom_zh, "causes_zh": list(self.causes_zh), "fixes_zh": list(self.fixes_zh),
        }


def _sources() -> list:
    """data/table.toml (the source article's rows and the foundation's), then one file per check family
    in data/table/, in name order: adding a family's rows touches only its own file."""
    data = resources.files("tfcheck").joinpath("data")
    family = data.joinpath("table")
    extra = sorted((f for f in family.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name) \
        if family.is_dir() else []
    return [data.joinpath("table.toml"), *extra]


@functools.cache
def rows() -> dict[str, Row]:
    out = {}
    for source in _sources():
        for r in tomllib.loads(source.read_text("utf-8")).get("row", []):
            if r["id"] in out:
                raise ValueError(f"troubleshooting row {r['id']!r} is defined twice (again in {source.name})")
            out[r["id"]] = _row(r)
    return out


def _row(r: dict) -> Row:
    return Row(
            id=r["id"], symptom=r["symptom"], causes=tuple(r["causes"]), fixes=tuple(r["fixes"]),
            checks=tuple(r.get("checks", ())), patterns=tuple(r.get("patterns", ())), source=r["source"],
            symptom_zh=r["symptom_zh"], causes_zh=tuple(r["causes_zh"]), fixes_zh=tuple(r["fixes_zh"]),
        )


def row(row_id: str) -> Row:
    try:
        return rows()[row_id]
    except KeyError:
        raise KeyError(f"no troubleshooting row {row_id!r}; rows are: {', '.join(rows())}") from None


def match_error(message: str) -> Row | None:
    """The first row whose patterns match an exception message, or None."""
    for r in rows().values():
        if any(re.search(p, message) for p in r.patterns):
            return r
    return None
