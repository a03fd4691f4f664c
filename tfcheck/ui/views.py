"""The views of the data classes that print themselves: registered with ``tfcheck.display`` on import, so that
``str()``, ``print()`` and rich draw a report, an explanation, a trace or a non-finite value as tfcheck shows it.
The front ends import this module; the data never does."""
from __future__ import annotations

from rich.text import Text
from rich.tree import Tree

from tfcheck.display import rich_view, text_view
from tfcheck.explainers.explanation import Explanation
from tfcheck.report import table
from tfcheck.report.report import Report
from tfcheck.tools.trace import Trace
from tfcheck.tools.watch import NonFinite
from tfcheck.ui.render import render_text, row_view, to_string
from tfcheck.ui.render_trace import trace_tree


@text_view.register
def _report_text(report: Report) -> str:
    return render_text(report)


@rich_view.register
def _report_rich(report: Report) -> Text:
    return Text.from_ansi(render_text(report, color=True).rstrip("\n"))


@rich_view.register
def _explanation_tree(explanation: Explanation) -> Tree:
    node = Tree(Text(explanation.message, style="bold"))
    if not explanation.matched:
        node.add(Text("no troubleshooting row matches this error (`tfcheck table` lists the known ones)"))
    location = explanation.location
    if location.module is not None or location.file:
        node.add(Text(f"where: {location}"))
    for item in explanation.look_at:
        node.add(Text(f"look at: {item}"))
    if not explanation.matched:  # the generic row would read as a diagnosis it is not
        return node
    node.add(row_view(table.row(explanation.row)))
    for row_id in explanation.also:
        # Only the headline: the likeliest row is shown in full, the others are where to read on.
        node.add(Text.assemble(("see also ", "dim"), (f"[{row_id}] ", "bold"), table.row(row_id).symptom))
    return node


@text_view.register
def _explanation_text(explanation: Explanation) -> str:
    return to_string(explanation, width=100).rstrip("\n")


@rich_view.register
def _trace_tree(trace: Trace) -> Tree:
    return trace_tree(trace)


@text_view.register
def _trace_text(trace: Trace) -> str:
    return to_string(trace, width=120)


@rich_view.register
def _non_finite_tree(found: NonFinite) -> Tree:
    node = Tree(Text(found.message, style="bold"))
    node.add(row_view(table.row(found.row)))
    return node
