"""Rendering reports, findings and the troubleshooting table with rich, to a string.

No Console is created at import time, and every user string is escaped (``layers[0]`` is not markup).
"""
from __future__ import annotations

import io
from collections.abc import Iterable

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tfcheck.report import table as tt
from tfcheck.report.findings import Finding
from tfcheck.report.report import Report
from tfcheck.report.root_cause import in_cause_order
from tfcheck.report.status import Status
from tfcheck.ui.report_text import problem_lines, report_view
from tfcheck.ui.styles import status_text


def to_string(renderable, width: int = 100, color: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system="standard" if color else None, force_terminal=color,
                      highlight=False, soft_wrap=False)
    console.print(renderable)
    return strip_trailing(buf.getvalue())  # rich pads wrapped lines and table cells to the width


def render_text(report: Report, only_problems: bool = False, width: int = 100, color: bool = False,
                verbose: bool = False) -> str:
    """The compact text report (tfcheck.ui.report_text); ``only_problems`` leaves out the passing checks' lines."""
    shown = report if not only_problems else _problems_only(report)
    return to_string(report_view(shown, width, verbose), width, color)


def strip_trailing(text: str) -> str:
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def _problems_only(report: Report) -> Report:
    import dataclasses

    return dataclasses.replace(report, models=[
        dataclasses.replace(m, results=[r for r in m.results if r.status not in (Status.PASS, Status.SKIP)])
        for m in report.models])


def _problems(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status in (Status.FAIL, Status.ERROR, Status.WARN, Status.ACCEPTED)]


def row_view(row: tt.Row, lang: str = "en"):
    symptom, causes, fixes = row.text(lang)
    # The Chinese labels are the column headings of the source article's table (报错信息/可能原因/解决方法).
    cause_label, fix_label = ("可能原因", "解决方法") if lang == "zh" else ("likely cause", "fix")
    node = Tree(Text.assemble(("troubleshooting ", "dim"), (f"[{row.id}] ", "bold"), symptom))
    for c in causes:
        node.add(Text(f"{cause_label}: {c}"))
    for fx in fixes:
        node.add(Text(f"{fix_label}: {fx}"))
    return node


def render_finding(f: Finding, width: int = 100, color: bool = False, verbose: bool = False) -> str:
    """One problem as the text report shows it (where it points first, its row's fix; ``verbose``: the evidence)."""
    return strip_trailing(to_string(Group(*problem_lines(f, verbose=verbose)), width, color))


def table_view(lang: str = "en"):
    """The whole table, one tree per row (long symptoms and fixes read better as lines than as cells)."""
    heading = "tfcheck troubleshooting table" if lang == "en" else "tfcheck 常见问题排查表"
    nodes = []
    for r in tt.rows().values():
        node = row_view(r, lang)
        node.add(Text("checks: " + (", ".join(r.checks) or "-"), style="dim"))
        node.add(Text("source: " + r.source, style="dim"))
        nodes.append(node)
    return Group(Text(heading, style="bold"), *nodes)


def checks_view(checks) -> Table:
    t = Table(title="tfcheck checks", show_lines=False)
    for col in ("id", "title", "applies to", "rows"):
        t.add_column(col, overflow="fold")
    for c in checks:
        kinds = ", ".join(sorted(k or "unknown" for k in c.kinds))
        t.add_row(c.id, c.title, kinds, ", ".join(c.rows))
    return t


def summary_view(report: Report, width: int = 100):
    """The pytest terminal summary: a line per model with its headline and counts, then each problem once (where it
    points first), one line each: pytest's failure sections hold the details and its last line the verdict."""
    lines: list[Text] = []
    for m in report.models:
        verdict = m.verdict
        lines.append(Text.assemble(status_text(verdict.status), verdict.headline[len(verdict.status.value):],
                                   " ", (m.spec, "bold"), f": {verdict.counts_text()}"))
        for f in in_cause_order(_problems(list(m.findings()))):
            where = f" at {f.location}" if f.location is not None and f.location.file else ""
            because = f" (explained by {f.explained_by})" if f.explained_by else ""
            because += f" (accepted: {f.evidence['accepted']})" if "accepted" in f.evidence else ""
            row = f" [row {f.row}]" if f.row else ""
            line = Text.assemble("  ", status_text(f.status), f" {f.check}{because}{where}{row}: ", f.message)
            line.truncate(width, overflow="ellipsis")
            lines.append(line)
    return Group(*lines)
