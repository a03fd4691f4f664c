"""GitHub Actions annotations: one workflow command per problem of a report, at the user's source line.

``::error file=PATH,line=N,title=CHECK_ID::MESSAGE`` for a failure (or an error of tfcheck itself),
``::warning ...`` for a warning; passes, skips and accepted failures print nothing. GitHub shows each one
on the pull request's diff at PATH:N and in the run's summary.

Where a finding points: its own location (the op or layer tfcheck found, file and line) when it has a
line, else the line that defines the model (its class or factory, read with inspect). A path is given
relative to the repository ($GITHUB_WORKSPACE, else the current directory); a file outside it (a library
in site-packages) is named in the message instead, since GitHub can only annotate the repository's files.
"""
from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import Any

from tfcheck.report.findings import Finding
from tfcheck.report.status import Status

#: Report formats of `tfcheck check --format` and `pytest --tfcheck-format`.
FORMATS = ("text", "github")
LEVELS = {Status.FAIL: "error", Status.ERROR: "error", Status.WARN: "warning"}


def escape_data(text: str) -> str:
    """A command's message: % first, then the line breaks (GitHub's workflow-command rules)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value (file, title): as a message, and ':' and ',' too, which separate properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, *, file: str | None = None, line: int | None = None,
            title: str | None = None) -> str:
    """One workflow command: ``::LEVEL file=...,line=...,title=...::MESSAGE``."""
    props = []
    if file:
        props.append(f"file={escape_property(file)}")
        if line:
            props.append(f"line={int(line)}")
    if title:
        props.append(f"title={escape_property(title)}")
    return f"::{level} {','.join(props)}::{escape_data(message)}" if props else f"::{level}::{escape_data(message)}"


def github_annotations(report, workspace: str | Path | None = None) -> list[str]:
    """The annotation lines of a report (tfcheck.report.report.Report), in report order."""
    base = Path(workspace or os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    lines = []
    defined: dict[str, tuple[str | None, int | None]] = {}
    for model in report.models:
        for finding in model.findings():
            level = LEVELS.get(finding.status)
            if level is None:
                continue
            if model.spec not in defined:
                defined[model.spec] = model_definition(model.spec)
            file, line = _where(finding, defined[model.spec])
            relative = _in_workspace(file, base)
            message = _message(model.spec, finding)
            if file and relative is None:
                message += f" (at {file}" + (f":{line})" if line else ")")
            lines.append(command(level, message, file=relative, line=line if relative else None,
                                 title=finding.check))
    return lines


def _where(finding: Finding, definition: tuple[str | None, int | None]) -> tuple[str | None, int | None]:
    loc = finding.location
    if loc is not None and loc.file and loc.line:
        return loc.file, loc.line
    return definition


def _message(spec: str, finding: Finding) -> str:
    text = f"{spec}: {finding.message}"
    if finding.row:
        from tfcheck.report import table

        try:
            row = table.row(finding.row)
        except KeyError:
            return text
        fix = f"; fix: {row.fixes[0]}" if row.fixes else ""
        text += f"\ntroubleshooting [{row.id}] {row.symptom}{fix}"
    return text


def _in_workspace(file: str | None, base: Path) -> str | None:
    """``file`` relative to the workspace, in the forward-slash form GitHub expects; None outside it."""
    if not file:
        return None
    path = Path(file)
    if not path.is_absolute():
        path = Path.cwd() / path
    try:
        return path.resolve().relative_to(base).as_posix()
    except (ValueError, OSError):
        return None


def model_definition(spec: str, base: Path | None = None) -> tuple[str | None, int | None]:
    """(file, line) of the class or factory a spec names; (None, None) when it cannot be found (a spec of an
    object tfcheck was given directly, a C extension, a module that no longer imports)."""
    obj = _resolve(spec, base)
    if obj is None:
        return None, None
    if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj)):
        obj = type(obj)  # an instance: where its class is defined
    try:
        file = inspect.getsourcefile(obj)
        line = inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return None, None
    return file, line


def _resolve(spec: str, base: Path | None) -> Any:
    from tfcheck.errors import TfcheckError
    from tfcheck.model.build.spec import file_module_name, import_target, is_file_target, resolve_attr, split_spec

    try:
        target, attr = split_spec(spec)
    except TfcheckError:
        return None
    # The run imported the module already (except on an xdist controller); a file spec's module is kept under
    # the name tfcheck.model.build.spec gives it, and importing the file again would run it again.
    name = file_module_name(Path(base or Path.cwd()) / target) if is_file_target(target) else target
    try:
        module = sys.modules.get(name) or import_target(target, base)
        return resolve_attr(module, target, attr)
    except Exception:  # noqa: BLE001 - no location is better than a crash at the end of a run
        return None
