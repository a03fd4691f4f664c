"""Rendering reports, findings and the troubleshooting table with rich, to a string.

No Console is created at import time, and every user string is escaped (``layers[0]`` is not markup).
"""
from __future__ import annotations

import io
from collections.abc import Iterable

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tfcheck.report import table as tt
from tfcheck.report.findings import Finding
from tfcheck.report.report import ModelReport, Report
from tfcheck.report.root_cause import in_cause_order
from tfcheck.report.status import Status

#: Evidence shown otherwise than as "key: value" lines.
_DRAWN_EVIDENCE = frozenset({"traceback", "leak_map_data", "leak_map"})

STYLE = {Status.PASS: "green", Status.ACCEPTED: "cyan", Status.SKIP: "yellow", Status.WARN: "magenta",
         Status.FAIL: "bold red", Status.ERROR: "bold red"}


def to_string(renderable, width: int = 100, color: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system="standard" if color else None, force_terminal=color,
                      highlight=False, soft_wrap=False)
    console.print(renderable)
    return buf.getvalue()


def render_text(report: Report, only_problems: bool = False, width: int = 100, color: bool = False) -> str:
    return to_string(Group(*[model_view(m, only_problems) for m in report.models]), width, color)


def model_view(model: ModelReport, only_problems: bool = False):
    tree = Tree(Text.assemble(("tfcheck ", "bold"), (model.spec, "bold"), "  ", _status_text(model.status)))
    if model.assumptions and not only_problems:
        facts = tree.add(Text("assumptions", style="dim"))
        for a in model.assumptions:
            facts.add(Text.assemble((f"{a.key} = {a.value!s}", ""), (f"  ({a.source})", "dim")))
    checks = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    checks.add_column("status", no_wrap=True)
    checks.add_column("check", no_wrap=True)
    checks.add_column("result")
    checks.add_column("cost", no_wrap=True, style="dim")
    for r in model.results:
        if only_problems and r.status in (Status.PASS, Status.SKIP):
            continue
        shown = _problems(r.findings) or r.findings[:1]
        checks.add_row(_status_text(r.status), r.check, escape(shown[0].message),
                       f"{r.cost.forward} fwd, {r.cost.token_passes} tok")
        for f in shown[1:]:
            checks.add_row("", "", escape(f.message), "")
    tree.add(checks)
    for f in in_cause_order(_problems(list(model.findings()))):
        tree.add(finding_view(f))
    return tree


def _problems(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status in (Status.FAIL, Status.ERROR, Status.WARN, Status.ACCEPTED)]


def _status_text(status: Status) -> Text:
    return Text(status.value.upper(), style=STYLE[status])


def finding_view(f: Finding):
    """One finding with where it points, its evidence and its troubleshooting row."""
    node = Tree(Text.assemble(_status_text(f.status), " ", (f.check, "bold"), ": ", f.message))
    if f.explained_by is not None:
        node.add(Text(f"explained by: {f.explained_by} (fix that first: this finding may go with it)", style="bold"))
    if f.location is not None and (f.location.module is not None or f.location.file):
        node.add(Text(f"where: {f.location}"))
        if f.location.reason:
            node.add(Text(f"no line: {f.location.reason}", style="dim"))
    for related in f.related:
        node.add(Text(str(related), style="dim"))
    if f.evidence:
        ev = node.add(Text("evidence", style="dim"))
        for k, v in f.evidence.items():
            if k not in _DRAWN_EVIDENCE:
                ev.add(Text(f"{k}: {v}"))
        if "traceback" in f.evidence:
            ev.add(Text(str(f.evidence["traceback"])))
        if "leak_map_data" in f.evidence:  # drawn as a coloured query x key table, not printed as data
            from tfcheck.ui.leakmap import LeakMap

            node.add(LeakMap.from_evidence(f.evidence["leak_map_data"]).renderable())
    if f.row:
        node.add(row_view(tt.row(f.row)))
    return node


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


def render_finding(f: Finding, width: int = 100, color: bool = False) -> str:
    return to_string(finding_view(f), width, color)


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


def summary_view(report: Report):
    """The pytest terminal summary: one line per model, then the problems with their rows."""
    t = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col in ("model", "status", "pass", "warn", "fail", "skip", "accepted"):
        t.add_column(col, no_wrap=col != "model")
    for m in report.models:
        counts = {s: sum(1 for r in m.results if r.status is s) for s in Status}
        t.add_row(escape(m.spec), _status_text(m.status), str(counts[Status.PASS]), str(counts[Status.WARN]),
                  str(counts[Status.FAIL] + counts[Status.ERROR]), str(counts[Status.SKIP]),
                  str(counts[Status.ACCEPTED]))
    parts: list[Table | Text] = [t]
    for m in report.models:
        for f in in_cause_order(_problems(list(m.findings()))):
            because = f" (explained by {f.explained_by})" if f.explained_by else ""
            parts.append(Text.assemble(_status_text(f.status), f" {m.spec} {f.check}{because}: ", f.message,
                                       (f"  -> table row [{f.row}]" if f.row else "", "dim")))
    return Group(*parts)
