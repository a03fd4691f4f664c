"""Models and declarations listed in pyproject.toml under ``[[tool.tfcheck.models]]``:

    [[tool.tfcheck.models]]
    spec = "mymodel:GPT"
    kind = "decoder"
    mask = "attention_mask:keep"
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from tfcheck.model import declarations as decl
from tfcheck.errors import UsageError


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
    for i, entry in enumerate(entries):
        where = f"{pyproject.name} [[tool.tfcheck.models]] #{i + 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("spec"), str):
            raise UsageError(f"{where}: every entry needs spec = \"module:attr\"")
        keys = {k: v for k, v in entry.items() if k != "spec"}
        out.append((entry["spec"], decl.from_mapping(keys, where)))
    return out


def declarations_for(spec: str, pyproject: Path | None) -> dict[str, decl.Declared]:
    for entry_spec, keys in model_entries(pyproject):
        if entry_spec == spec:
            return keys
    return {}
