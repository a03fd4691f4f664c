"""How a failed tfcheck item is shown, for each ``--tb`` style, with no traceback of tfcheck's internals.

``long`` / ``auto`` / ``native``: each problem finding as the text report renders it, at the terminal's width;
``short``: each one's first lines (status, check, message, where, row); ``line``: one line, ``FILE:LINE: STATUS
CHECK: MESSAGE``. ``str()`` (what JUnit XML and pytest-xdist's workers carry) is never wrapped: a viewer wraps.
``reprcrash`` gives pytest's one-line places (``--tb=line``, the short summary, JUnit's ``message``) the message
whole.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

from tfcheck.report.findings import Finding
from tfcheck.report.status import Status

#: A width no message reaches: str() and JUnit get each logical line whole.
UNWRAPPED = 100_000
PROBLEMS = (Status.FAIL, Status.ERROR, Status.WARN)


@dataclass(frozen=True)
class Crash:
    """pytest's ReprFileLocation in the parts pytest reads: ``path``, ``lineno``, ``message``."""

    path: str
    lineno: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.message}"


class FailureRepr:
    """The longrepr of a failed item (pytest calls ``toterminal``; JUnit and xdist call ``str``)."""

    def __init__(self, findings: list[Finding], style: str, crash: Crash, reason: str | None = None,
                 rerun: str | None = None):
        self.findings = findings
        self.style = style
        self.reprcrash = crash
        self.reason = reason  # why it fails when that is not the findings' own status
        self.rerun = rerun  # the command that reruns it, when its id cannot be pasted (never wrapped)

    def toterminal(self, tw) -> None:
        if self.style == "line":
            return  # pytest writes the crash line itself
        tw.write(self.text(getattr(tw, "fullwidth", 100)))

    def __str__(self) -> str:
        return str(self.reprcrash) if self.style == "line" else self.text(UNWRAPPED).rstrip("\n")

    def text(self, width: int) -> str:
        if self.style == "short":
            body = "".join(wrapped(short_text(f), width) for f in self.findings)
        else:
            from tfcheck.ui.render import render_finding

            body = "".join(unpadded(render_finding(f, width=width)) for f in self.findings)
        reason = wrapped(f"tfcheck: {self.reason}\n", width) if self.reason else ""
        return body + reason + (f"rerun: {self.rerun}\n" if self.rerun else "")


def short_text(f: Finding) -> str:
    lines = [f"{f.status.value.upper()} {f.check}: {f.message}"]
    if f.location is not None and (f.location.file or f.location.module is not None):
        lines.append(f"  at {f.location}")
    if f.row:
        lines.append(f"  troubleshooting [{f.row}]")
    return "".join(line + "\n" for line in lines)


def wrapped(text: str, width: int) -> str:
    """Each line of ``text`` wrapped at ``width``, its continuation lines indented under the first's text."""
    if width >= UNWRAPPED:
        return text
    out = []
    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return "".join(line + "\n" for line in out)


def unpadded(text: str) -> str:
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def shown_findings(findings: list[Finding]) -> list[Finding]:
    """The findings a failure shows: its problems, else all (a budget overrun's skip is the reason itself)."""
    return [f for f in findings if f.status in PROBLEMS] or list(findings)


def crash_line(f: Finding, place: tuple[str, int]) -> Crash:
    return Crash(place[0], place[1], f"{f.status.value.upper()} {f.check}: {' '.join(f.message.split())}")
