"""Which file a model's items hang under, so that an item's id can be pasted back to pytest.

pytest reads ``FILE::NAME[PARAMS]``: a ``[`` may only follow the last ``::`` part, so ``tfcheck[SPEC]::CHECK``
cannot start an id. The items of a model hang under a file instead: the model's file (a path spec's file, a
module spec's source file) or, for a model listed by ``--tfcheck-all``, the pyproject.toml that lists it; an
item is named ``tfcheck[LABEL]::CHECK`` under it, so ``model.py::tfcheck[model.py:GPT]::mask.causal`` is one
id that pytest, given it, collects through ``pytest_collect_file`` of that file. Nothing is collected from a
file that no ``--tfcheck`` spec and no such id names. A model whose file lies outside pytest's rootdir (an
installed package) keeps a rootless ``tfcheck[LABEL]`` collector, and its failures print the command that
reruns them.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from tfcheck.errors import TfcheckError, UsageError
from tfcheck.model.build.spec import is_file_target, split_spec
from tfcheck.model.facts.project_config import Entry, model_entries

#: How an item's model part starts: ``tfcheck[LABEL]``.
PREFIX = "tfcheck["


def label_of(entry: Entry) -> str:
    """The name between the brackets: the entry's name, else its spec."""
    return entry.name or entry.spec


def absolute(path: Path) -> Path:
    """A path as pytest spells collection arguments (absolute, symlinks kept), so that the two compare equal."""
    return Path(os.path.abspath(path))


def spec_file(spec: str, base: Path) -> Path | None:
    """The file a spec names, found without importing anything; None when there is none (a spec that does not
    read, a module that is not found, a namespace package)."""
    try:
        target, _ = split_spec(spec)
    except TfcheckError:
        return None
    if is_file_target(target):
        path = absolute(base / target)
        return path if path.is_file() else None
    return module_file(target, base)


def module_file(name: str, base: Path) -> Path | None:
    """The source file of module ``name``, looked up as tfcheck imports it (``base`` first, then sys.path) but
    without running a package's ``__init__``: the parent packages are searched, not imported."""
    loaded_file = getattr(sys.modules.get(name), "__file__", None)
    if loaded_file:
        return absolute(Path(loaded_file))
    top, *subs = name.split(".")
    try:
        found = importlib.machinery.PathFinder.find_spec(top, [str(base)]) or importlib.util.find_spec(top)
        for sub in subs:
            if found is None or not found.submodule_search_locations:
                return None
            found = importlib.machinery.PathFinder.find_spec(sub, list(found.submodule_search_locations))
    except (ImportError, ValueError):  # a name that is not a module name, a broken finder: no file
        return None
    if found is None or not found.has_location or not found.origin:
        return None
    return absolute(Path(found.origin))


def anchor_for(entry: Entry, listed_by_pyproject: bool, pyproject: Path | None, base: Path,
               rootpath: Path) -> Path | None:
    """The file an entry's items hang under: its pyproject.toml when only ``--tfcheck-all`` brought it, else the
    model's file; None when that is not below the rootdir (pytest could not be given its id back)."""
    path = pyproject if listed_by_pyproject else spec_file(entry.spec, base)
    if path is None:
        return None
    path = absolute(path)
    try:
        path.relative_to(absolute(rootpath))
    except ValueError:
        return None
    return path


def loading_spec(entry: Entry, anchor: Path, pyproject: Path | None, base: Path) -> str:
    """The spec to load for a pasted id: as written, unless it is a path spec that, read from this directory, no
    longer names the anchor file (pytest run from elsewhere): then the anchor itself."""
    target, attr = split_spec(entry.spec)
    if anchor != pyproject and is_file_target(target) and spec_file(entry.spec, base) != anchor:
        return f"{anchor}:{attr}"
    return entry.spec


@dataclass(frozen=True)
class Requested:
    """A ``FILE::tfcheck[LABEL]...`` argument of the command line: a model pytest is asked to collect from FILE."""

    path: Path
    label: str


def requested_models(args: list[str], base: Path) -> list[Requested]:
    """The models the command line's ``FILE::tfcheck[LABEL]::CHECK`` arguments name, each once, in order."""
    found: list[Requested] = []
    for arg in args:
        path_part, sep, rest = arg.partition("::" + PREFIX)
        if not sep or "::" in path_part:
            continue
        label, sep, _check = rest.rpartition("]::")
        if not sep:
            label = rest[:-1] if rest.endswith("]") else ""
        wanted = Requested(absolute(base / path_part), label)
        if label and wanted not in found:
            found.append(wanted)
    return found


def plain_paths(args: list[str], base: Path) -> set[Path]:
    """The files the command line names otherwise than by a tfcheck id: pytest collects their tests as usual."""
    out = set()
    for arg in args:
        path_part, sep, _ = arg.partition("::" + PREFIX)
        if not sep:
            out.add(absolute(base / arg.partition("::")[0].partition("[")[0]))
    return out


def requested_entry(wanted: Requested, pyproject: Path | None) -> Entry:
    """The entry a pasted id means: the pyproject entry of that name, else the unnamed one of that spec, else the
    spec alone (a pyproject.toml id must name one of its entries)."""
    entries = model_entries(pyproject)
    chosen = ([e for e in entries if e.name == wanted.label]
              or [e for e in entries if e.name is None and e.spec == wanted.label])
    if chosen:
        return chosen[0]
    if pyproject is not None and wanted.path == absolute(pyproject):
        raise UsageError(f"{pyproject} has no [[tool.tfcheck.models]] entry named {wanted.label!r} or with spec = "
                         f"{wanted.label!r}: run `pytest --tfcheck-all --collect-only -q` for the ids it has")
    return Entry(wanted.label, {})


def rerun_command(entry: Entry, check_id: str, declarations: tuple[str, ...]) -> str:
    """The command that reruns one item whose id cannot be given back to pytest."""
    selected = f"{PREFIX}{entry.name}] and {check_id}" if entry.name else check_id
    argv = ["pytest", "--tfcheck", entry.spec, *(f"--tfcheck-set={d}" for d in declarations), "-k", selected]
    return shlex.join(argv)
