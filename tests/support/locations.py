"""The location rule of issue 16, shared by the check tests and the gallery test: a finding that is a
problem (fail or warn) names a module and the user's file:line, or says why it cannot (``location.reason``)."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

from snapshot import REPO
from tfcheck.report.status import Status

#: How a model's source marks the line of its defect: ``# tfcheck: defect`` in its class body, or
#: ``# tfcheck: defect(ClassName)`` on a line outside it (a helper or an attention class it uses).
MARK = re.compile(r"#\s*tfcheck:\s*defect(?:\((\w+)\))?")

PROBLEMS = (Status.FAIL, Status.WARN)


def unlocated(findings) -> list[str]:
    """The problems among ``findings`` that break the rule, each as 'check: message' for the assertion."""
    bad = []
    for f in findings:
        if f.status not in PROBLEMS:
            continue
        loc = f.location
        if loc is None or loc.module is None:
            bad.append(f"{f.check}: no module ({f.message[:100]})")
        elif not (loc.file and loc.line) and not loc.reason:
            bad.append(f"{f.check}: module {loc.module!r} but no file:line and no reason ({f.message[:100]})")
    return bad


def defect_lines(cls) -> set[tuple[str, int]]:
    """(repo-relative file, line) of every line marked as ``cls``'s defect."""
    path = Path(inspect.getsourcefile(cls)).resolve()
    lines, start = inspect.getsourcelines(cls)
    inside = range(start, start + len(lines))
    marked = set()
    for n, text in enumerate(path.read_text().splitlines(), 1):
        m = MARK.search(text)
        if m and (m.group(1) == cls.__name__ or (m.group(1) is None and n in inside)):
            marked.add((str(path.relative_to(REPO)), n))
    return marked


def at(place) -> tuple[str | None, int | None]:
    """(repo-relative file, line) of a finding's location or related line, as ``defect_lines`` names them."""
    file = place.file
    if not file:
        return None, place.line
    path = Path(file.replace("<repo>/", str(REPO) + "/")).resolve()
    return (str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)), place.line
