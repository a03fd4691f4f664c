"""Models and declarations listed in pyproject.toml under ``[[tool.tfcheck.models]]``:

    [[tool.tfcheck.models]]
    spec = "mymodel:GPT"
    kind = "decoder"
    mask = "attention_mask:keep"
"""
from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tfcheck.errors import UsageError
from tfcheck.model.facts import declarations as decl


def find_pyproject(start: Path) -> Path | None:
    for directory in [start, *start.parents]:
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class Entry:
    """One model to check: a spec, its declarations, and the name that tells two entries of one spec apart."""

    spec: str
    declared: dict[str, decl.Declared]
    name: str | None = None

    @property
    def label(self) -> str:
        """How the report and the messages name it: the spec, with the entry's name when it has one."""
        return f"{self.spec}[{self.name}]" if self.name else self.spec


def model_entries(pyproject: Path | None) -> list[Entry]:
    """Every [[tool.tfcheck.models]] entry; errors name the file and entry. One spec may appear in several
    entries (one class at two sizes) when each has its own ``name``."""
    if pyproject is None:
        return []
    try:
        data = tomllib.loads(pyproject.read_text("utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {pyproject}: {exc}") from None
    return entries_of(data, pyproject)


def entries_of(data: dict, pyproject: Path) -> list[Entry]:
    """The entries of a parsed pyproject.toml; any other shape of [tool.tfcheck] is a usage error naming the key."""
    entries = tfcheck_table(data, pyproject).get("models", [])
    if not isinstance(entries, list):
        raise UsageError(f"{pyproject}: tool.tfcheck.models must be an array of tables ([[tool.tfcheck.models]])")
    out: list[Entry] = []
    for i, entry in enumerate(entries):
        where = f"{pyproject.name} [[tool.tfcheck.models]] #{i + 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("spec"), str):
            raise UsageError(f"{where}: every entry needs spec = \"module:attr\"")
        declared = decl.from_mapping({k: v for k, v in entry.items() if k != "spec"}, where)
        name = declared["name"].value if "name" in declared else None
        out.append(Entry(entry["spec"], declared, name))
        _refuse_duplicate(out, pyproject.name)
    return out


def tfcheck_table(data: dict, pyproject: Path) -> dict:
    """The [tool.tfcheck] table, refused with the file, the key and what belongs there when the TOML holds
    anything else: a value where a table goes (``tool = 3``), a declaration outside a model's entry, a misspelt
    key (which would otherwise be ignored, and the model checked without what the user meant to say)."""
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise UsageError(f"{pyproject}: tool = {tool!r} is {_toml_kind(tool)}; tool must be a table ([tool...] "
                         "sections), tfcheck's under it as [[tool.tfcheck.models]]")
    table = tool.get("tfcheck", {})
    if not isinstance(table, dict):
        raise UsageError(f"{pyproject}: tool.tfcheck = {table!r} is {_toml_kind(table)}; it must be a table "
                         "holding [[tool.tfcheck.models]] entries")
    for key in table:
        if key == "models":
            continue
        if key in decl.KEYS:
            raise UsageError(f"{pyproject}: tool.tfcheck.{key}: a declaration belongs to one model: put {key} = ... "
                             "in its [[tool.tfcheck.models]] entry, beside spec = \"module:attr\"")
        close = difflib.get_close_matches(key, ["models"], n=1)
        raise UsageError(f"{pyproject}: unknown key tool.tfcheck.{key}"
                         f"{'; did you mean models' if close else ''}: [tool.tfcheck] holds only "
                         "[[tool.tfcheck.models]] entries")
    return table


def _toml_kind(value: object) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def _refuse_duplicate(entries: list[Entry], file: str) -> None:
    """The newest entry against the earlier ones: one spec twice needs a distinct name on each (the CLI ran
    both with the first entry's declarations and pytest merged them into one model)."""
    new = entries[-1]
    for i, old in enumerate(entries[:-1]):
        same_name = new.name is not None and new.name == old.name
        if old.spec != new.spec and not same_name:
            continue
        first, second = f"#{i + 1}", f"#{len(entries)}"
        if same_name:
            raise UsageError(f"{file} [[tool.tfcheck.models]] {first} and {second} are both named {new.name!r}: "
                             "give each entry its own name")
        if old.name is None or new.name is None:
            raise UsageError(f"{file} [[tool.tfcheck.models]] {first} and {second} both have spec = {new.spec!r}: "
                             "merge them into one entry, or, for one model at two sizes, give each entry a name "
                             '(name = "small" and name = "large"), which becomes its test id tfcheck[small]')


def unique_specs(specs: list[str]) -> tuple[list[str], list[str]]:
    """The specs in order with repeats dropped, and the repeats (a spec given twice is one model)."""
    seen: list[str] = []
    repeated: list[str] = []
    for spec in specs:
        (repeated if spec in seen else seen).append(spec)
    return seen, repeated


def models_to_run(given: list[str], pyproject: Path | None, include_all: bool) -> list[Entry]:
    """The entries the CLI and the pytest plugin check, alike: each spec given (every named entry of it, or
    the spec alone when pyproject has none), then, with ``include_all``, every other entry."""
    entries = model_entries(pyproject)
    runs: list[Entry] = []
    for spec in given:
        runs += [e for e in entries if e.spec == spec] or [Entry(spec, {})]
    if include_all:
        runs += [e for e in entries if e.spec not in given]
    return runs


def declarations_for(spec: str, pyproject: Path | None, name: str | None = None) -> dict[str, decl.Declared]:
    """The declarations of the entry for ``spec`` (the one called ``name`` when several entries share it)."""
    mine = [e for e in model_entries(pyproject) if e.spec == spec and (name is None or e.name == name)]
    if len(mine) > 1:
        names = ", ".join(repr(e.name) for e in mine)
        raise UsageError(f"{spec} has {len(mine)} entries in {pyproject} (named {names}): say which with the "
                         "'name' declaration, e.g. run_checks(spec, name=" f"{mine[0].name!r})")
    return mine[0].declared if mine else {}
