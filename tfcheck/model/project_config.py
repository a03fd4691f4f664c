"""Models and declarations listed in pyproject.toml under ``[[tool.tfcheck.models]]``:

    [[tool.tfcheck.models]]
    spec = "mymodel:GPT"
    kind = "decoder"
    mask = "attention_mask:keep"
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from tfcheck.errors import UsageError
from tfcheck.model import declarations as decl


def find_pyproject(start: Path) -> Path | None:
    for directory in [start, *start.parents]:
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def model_entries(pyproject: Path | None) -> list[tuple[str, dict[str, decl.Declared]]]:
    """(spec, declarations) for every [[tool.tfcheck.models]] entry; errors name the file and entry."""
    if pyproject is None:
        return []
    try:
        data = tomllib.loads(pyproject.read_text("utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read {pyproject}: {exc}") from None
    entries = data.get("tool", {}).get("tfcheck", {}).get("models", [])
    if not isinstance(entries, list):
        raise UsageError(f"{pyproject}: tool.tfcheck.models must be an array of tables ([[tool.tfcheck.models]])")
    out = []
    first: dict[str, int] = {}
    for i, entry in enumerate(entries):
        where = f"{pyproject.name} [[tool.tfcheck.models]] #{i + 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("spec"), str):
            raise UsageError(f"{where}: every entry needs spec = \"module:attr\"")
        if entry["spec"] in first:
            # The CLI ran both with the first entry's declarations and pytest merged them into one model.
            raise UsageError(f"{pyproject.name} [[tool.tfcheck.models]] #{first[entry['spec']] + 1} and #{i + 1} "
                             f"both have spec = {entry['spec']!r}: merge them into one entry (one spec is one model; "
                             "for one class at two sizes, give each size its own factory function)")
        first[entry["spec"]] = i
        keys = {k: v for k, v in entry.items() if k != "spec"}
        out.append((entry["spec"], decl.from_mapping(keys, where)))
    return out


def unique_specs(specs: list[str]) -> tuple[list[str], list[str]]:
    """The specs in order with repeats dropped, and the repeats (a spec given twice is one model)."""
    seen: list[str] = []
    repeated: list[str] = []
    for spec in specs:
        (repeated if spec in seen else seen).append(spec)
    return seen, repeated


def declarations_for(spec: str, pyproject: Path | None) -> dict[str, decl.Declared]:
    for entry_spec, keys in model_entries(pyproject):
        if entry_spec == spec:
            return keys
    return {}
