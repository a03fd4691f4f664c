"""Writing a report to a file, for both front ends (``tfcheck check --json`` and pytest's ``--tfcheck-json``):
the path is refused with what to do before anything runs, and a write that fails later is a usage error,
not a traceback. Imports neither torch nor rich: the pytest plugin imports it at start-up."""
from __future__ import annotations

import os
from pathlib import Path

from tfcheck.errors import UsageError


def writable_path(text: str, option: str) -> Path:
    """The path a report is to be written to, refused with what to do when it cannot be written: checked
    before the battery runs, so a typo does not cost the run."""
    path = Path(text)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"{option} {text}: that is a directory; give a file name, e.g. {path / 'report.json'}")
    if not parent.exists():
        raise UsageError(f"{option} {text}: the directory {parent} does not exist; create it (mkdir -p {parent}) "
                         "or give a path in an existing directory")
    if not parent.is_dir():
        raise UsageError(f"{option} {text}: {parent} is a file, not a directory; give a path in a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        what = "it" if path.exists() else f"in {parent}"
        raise UsageError(f"{option} {text}: permission denied (cannot write {what}); give a path you can write to")
    return path


def write_report(path: Path, text: str, option: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:  # the disk filled up, the directory went away since the check
        raise UsageError(f"{option} {path}: writing the report failed: {exc.strerror or exc}") from None
