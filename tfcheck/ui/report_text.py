"""The text report, compact: one line per check, each problem once with where it points first, one line of what
tfcheck guessed, and the verdict last. ``verbose`` adds every assumption with its source, the full messages, the
blocked checks by name, the evidence and the leak maps.

Every line is cut to the width (no wrapping inside the check table) and carries no trailing space.
"""
from __future__ import annotations

from collections.abc import Iterable

from rich.console import Group
from rich.padding import Padding
from rich.text import Text

from tfcheck.report import table as tt
from tfcheck.report.findings import Finding
from tfcheck.report.report import Assumption, ModelReport, Report
from tfcheck.report.root_cause import in_cause_order
from tfcheck.report.status import Status
from tfcheck.report.verdict import outcome
from tfcheck.ui.numbers import brief, seconds, shorten_reprs
from tfcheck.ui.styles import status_text

#: The statuses shown as a problem block below the check lines.
PROBLEMS = (Status.FAIL, Status.ERROR, Status.WARN, Status.ACCEPTED)
#: Evidence drawn otherwise than as "key: value" lines, or only for a machine.
_DRAWN_EVIDENCE = frozenset({"traceback", "leak_map_data", "leak_map"})
#: Assumption keys that are no fact about the model (shown on their own line, or in -v only).
_NOT_FACTS = frozenset({"not applicable", "limit of tfcheck"})
#: The guesses a verdict turns on most, named first on the guessed line (the sizes after them).
_FIRST_GUESSES = ("kind", "causal", "mask", "pad_id", "output", "head", "targets", "constructor arguments")
_STATUS_WIDTH = 5
_COST_WIDTH = 7
#: The check lines stop here on a wider terminal: the cost column stays within reach of the eye.
MAX_LINE = 120


def report_view(report: Report, width: int, verbose: bool = False) -> Group:
    parts: list = []
    for i, model in enumerate(report.models):
        if i:
            parts.append(Text(""))
        parts.extend(model_lines(model, width, verbose))
    if len(report.models) > 1:
        parts.extend([Text(""), overall_line(report)])
    return Group(*parts)


def overall_line(report: Report) -> Text:
    """``FAIL 3 models: 1 failed, 2 passed in 3.1 s``."""
    counts: dict[Status, int] = {}
    for m in report.models:
        counts[m.status] = counts.get(m.status, 0) + 1
    named = {Status.FAIL: "failed", Status.ERROR: "broke tfcheck", Status.WARN: "warned", Status.SKIP: "undecided",
             Status.ACCEPTED: "accepted", Status.PASS: "passed"}
    told = ", ".join(f"{n} {named[s]}" for s, n in sorted(counts.items(), key=lambda kv: -kv[0].severity))
    total = sum(m.seconds for m in report.models)
    return Text.assemble(status_text(report.status), f" {len(report.models)} models: {told} in {seconds(total)}")


def model_lines(model: ModelReport, width: int, verbose: bool = False) -> list:
    verdict = model.verdict
    header = Text.assemble(("tfcheck ", "bold"), (model.spec, "bold"), "  ", _headline(model))
    header.truncate(width, overflow="ellipsis")
    lines: list = [header]
    id_width = max((len(r.check) for r in model.results), default=0)
    blocked = [r for r in model.results if outcome(r) == "blocked"]
    for r in model.results:
        if r in blocked and not verbose:
            continue
        lines.append(_check_line(r, id_width, width, verbose))
    if blocked and not verbose:
        blockers = sorted({str(f.evidence.get("blocked_by")) for r in blocked for f in r.findings})
        lines.append(Text(f"{'':{_STATUS_WIDTH}} {len(blocked)} checks blocked by {', '.join(blockers)} "
                          "(-v lists them)", style="dim"))
    reads = {r.check: set(r.reads) for r in model.results}
    for f in in_cause_order([f for f in model.findings() if f.status in PROBLEMS]):
        guessed = [a for a in model.assumptions if not a.declared and a.key in reads.get(f.check, ())]
        lines.append(Text(""))
        lines.extend(problem_lines(f, guessed, verbose))
    lines.extend(_assumption_lines(model.assumptions, width, verbose))
    lines.append(Text.assemble(status_text(verdict.status), f" {verdict.counts_text()} in {seconds(model.seconds)}"))
    return lines


def _headline(model: ModelReport) -> Text:
    verdict = model.verdict
    head = verdict.headline
    status = verdict.status.value.upper()
    return Text.assemble(status_text(verdict.status), head[len(status):])


def _check_line(result, id_width: int, width: int, verbose: bool = False) -> Text:
    """Status, id, the result cut to the line (whole with ``verbose``) and the seconds it took."""
    shown = [f for f in result.findings if f.status is result.status] or result.findings
    message = shorten_reprs(shown[0].message.splitlines()[0]) if shown else ""
    room = max(10, min(width, MAX_LINE) - _STATUS_WIDTH - id_width - _COST_WIDTH - 3)
    text = Text(message)
    if not verbose:
        text.truncate(room, overflow="ellipsis", pad=True)
    return Text.assemble(status_text(result.status), " " * (_STATUS_WIDTH - len(result.status.value) + 1),
                         (f"{result.check:<{id_width}} ", "bold" if result.status in PROBLEMS else ""), text,
                         (f" {seconds(result.seconds):>{_COST_WIDTH}}", "dim"))


def problem_lines(f: Finding, guessed: Iterable[Assumption] = (), verbose: bool = False) -> list:
    """One problem: status and check, where it points, the message, the guesses its check read (``guessed``: the
    assumptions not declared), what explains it, its row's fix."""
    lines: list = [Text.assemble(status_text(f.status), " ", (f.check, "bold"))]
    body: list = []
    if f.location is not None and (f.location.module is not None or f.location.file):
        body.append(Text(f"where: {f.location}"))
        if f.location.reason and not f.location.line:
            body.append(Text(f"no line: {f.location.reason}", style="dim"))
    body.append(Text(shorten_reprs(f.message)))
    assumed = [_guess(a) for a in guessed]
    if assumed:
        body.append(Text("assumes (guessed, declare to change): " + ", ".join(assumed), style="bold"))
    if f.explained_by is not None:
        body.append(Text(f"explained by: {f.explained_by} (fix that first: this finding may go with it)",
                         style="bold"))
    body.extend(Text(str(related), style="dim") for related in f.related)
    if f.row:
        body.extend(_row_lines(f.row))
    if verbose:
        body.extend(_evidence_lines(f))
    lines.append(Padding(Group(*body), (0, 0, 0, 2)))
    return lines


def _row_lines(row_id: str) -> list[Text]:
    row = tt.row(row_id)
    symptom, causes, fixes = row.text("en")
    return ([Text(f"row [{row.id}]: {symptom}", style="dim")]
            + [Text(f"likely cause: {c}") for c in causes] + [Text(f"fix: {fx}") for fx in fixes])


def _evidence_lines(f: Finding) -> list:
    lines: list = []
    shown = {k: v for k, v in f.evidence.items() if k not in _DRAWN_EVIDENCE}
    if shown:
        lines.append(Text("evidence:", style="dim"))
        lines.extend(Text(f"  {k}: {brief(v, 200)}", style="dim") for k, v in shown.items())
    if "traceback" in f.evidence:
        lines.append(Text(str(f.evidence["traceback"]), style="dim"))
    if "leak_map_data" in f.evidence:  # drawn as a coloured query x key table, not printed as data
        from tfcheck.report.leak_map import LeakMap
        from tfcheck.ui.leakmap import leak_map_table

        lines.append(leak_map_table(LeakMap.from_evidence(f.evidence["leak_map_data"])))
    return lines


def _assumption_lines(assumptions: list[Assumption], width: int, verbose: bool) -> list:
    if verbose:
        facts = [Text.assemble(f"{a.key} = {brief(a.value, 10_000)}", (f"  ({a.source})", "dim")) for a in assumptions]
        return [Text("assumptions:", style="dim"), Padding(Group(*facts), (0, 0, 0, 2))]
    lines = []
    limits = [a for a in assumptions if a.key == "limit of tfcheck"]
    lines += [Text(f"limit of tfcheck: {a.value}: {a.source}") for a in limits]
    guessed = sorted((a for a in assumptions if not a.declared and a.key not in _NOT_FACTS),
                     key=lambda a: _FIRST_GUESSES.index(a.key) if a.key in _FIRST_GUESSES else len(_FIRST_GUESSES))
    if guessed:
        text = Text("guessed: " + ", ".join(_guess(a) for a in guessed)
                    + " (-v: all, with sources)", style="dim")
        text.truncate(width, overflow="ellipsis")
        lines.append(text)
    skipped = [str(a.value) for a in assumptions if a.key == "not applicable"]
    if skipped:
        text = Text(f"not applicable: {', '.join(skipped)} (-v: why)", style="dim")
        text.truncate(width, overflow="ellipsis")
        lines.append(text)
    return lines


def _guess(a: Assumption) -> str:
    return f"{a.key}=unknown" if a.value is None else f"{a.key}={brief(a.value, 24)} ({short_source(a.source)})"


def short_source(source: str, limit: int = 28) -> str:
    """The head of an assumption's source: ``config.vocab_size``, ``forward(x, mask=None)``."""
    head = source.split("; ")[0].split(": ")[0]
    return head if len(head) <= limit else head[:limit - 1] + "…"
