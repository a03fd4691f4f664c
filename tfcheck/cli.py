"""The command line: ``tfcheck check [SPEC ...]``, ``tfcheck list``, ``tfcheck table [ROW]``, ``tfcheck trace SPEC``,
``tfcheck explain TEXT``, ``tfcheck help [TOPIC]``.

Exit codes: 0 no failure; 1 a failure (or a warning under --strict); 2 bad usage or a model that cannot
be loaded; 3 tfcheck itself broke.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tfcheck.errors import TfcheckError, UsageError
from tfcheck.model.facts.declarations import BUDGET_OVERRUNS
from tfcheck.ui.annotations import FORMATS
from tfcheck.ui.io import writable_path, write_report
from tfcheck.ui.streams import never_failing

#: What `tfcheck check` runs with no spec: the bundled reference Transformers.
REFERENCE_SPECS = ("reference_model:TransformerEncoder", "reference_model:TransformerLM",
                   "reference_model:Seq2SeqTransformer")

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3
#: What a shell reports for a program ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    from tfcheck.version import __version__

    parser = argparse.ArgumentParser(prog="tfcheck", description="Diagnostics for Transformer implementations.")
    parser.add_argument("--version", action="version", version=f"tfcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run the battery on models (default: the bundled reference models)")
    check.add_argument("specs", nargs="*", metavar="SPEC", help="MODULE:ATTR or path/to/file.py:ATTR")
    check.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="declarations",
                       help="a declaration for every model given, e.g. kind=decoder (repeatable)")
    check.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH")
    check.add_argument("--images", action="store_true",
                       help="with --json: also draw each leak map as a PNG next to it (needs matplotlib)")
    check.add_argument("--only", metavar="IDS", help="comma-separated check ids to run (forward.smoke runs first)")
    check.add_argument("--strict", action="store_true",
                       help="warnings count as failures, and so do checks stopped by their budget")
    check.add_argument("--budget-overrun", choices=BUDGET_OVERRUNS, default=None,
                       help="what a check stopped by its budget counts as: skip (default) or fail (--strict's); "
                            "the same as --set budget_overrun=...")
    check.add_argument("--all", action="store_true", help="also every model in [[tool.tfcheck.models]]")
    check.add_argument("--format", choices=FORMATS, default="text",
                       help="github: also print a GitHub Actions ::error/::warning annotation per problem")
    check.add_argument("-v", "--verbose", action="store_true",
                       help="every assumption with its source, full messages, the blocked checks, the evidence")
    _color_option(check)
    sub.add_parser("list", help="list the checks and the declaration keys")
    table = sub.add_parser("table", help="print the troubleshooting table, or one row of it")
    table.add_argument("row", nargs="?", metavar="ROW", help="a row id, e.g. mat1-mat2-shapes (default: every row)")
    table.add_argument("--lang", choices=("en", "zh"), default="en", help="language (zh: the source wording)")
    trace = sub.add_parser("trace", help="trace one forward: module calls and attention ops with their shapes")
    trace.add_argument("spec", metavar="SPEC", help="MODULE:ATTR or path/to/file.py:ATTR")
    trace.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="declarations",
                       help="a declaration, e.g. kwargs='{\"num_layers\": 80}' (repeatable)")
    trace.add_argument("--meta", action="store_true",
                       help="trace on the meta device: build and run without allocating (any size)")
    trace.add_argument("--json", metavar="PATH", help="write the trace as JSON to PATH")
    trace.add_argument("--depth", type=_depth, metavar="N", help="show calls down to N levels below the model "
                       "(1: its direct children); deeper calls are folded into a count (default: every call)")
    _color_option(trace)
    explain = sub.add_parser("explain", help="explain an error message: its troubleshooting rows and what to look at")
    explain.add_argument("text", nargs="+", metavar="TEXT",
                         help="the error message or traceback ('-': read it from stdin)")
    explain.add_argument("--budget", metavar="SIZE",
                         help="memory that must suffice (e.g. 8GiB), for out-of-memory advice")
    _color_option(explain)
    guide = sub.add_parser("help", help="print a page of the user guide (no TOPIC: list the topics)")
    guide.add_argument("topic", nargs="?", metavar="TOPIC", help="a topic, e.g. declarations")
    return parser


def main(argv: list[str] | None = None) -> int:
    never_failing()  # before argparse: its own messages can quote a character the terminal cannot show
    args = build_parser().parse_args(argv)
    if argv is None and args.command in ("check", "trace"):  # the program, not a call from a test or a script
        _import_the_battery()
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "list":
            return _list()
        if args.command == "explain":
            return _explain(args)
        if args.command == "trace":
            return _trace(args)
        if args.command == "help":
            return _help(args.topic)
        return _table(args.row, args.lang)
    except TfcheckError as exc:
        print(f"tfcheck: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tfcheck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BaseException as exc:
        # pytest.skip / importorskip / exit called by a model file outside pytest: the file's own decision
        from tfcheck.model.build.user_code import is_pytest_outcome

        if is_pytest_outcome(exc):
            print(f"tfcheck: error: the model's code called pytest's {type(exc).__name__.lower()}: {exc}. Outside "
                  "pytest nothing can skip; install what it needs, or run it under pytest --tfcheck",
                  file=sys.stderr)
            return EXIT_USAGE
        raise


def _import_the_battery() -> None:
    """Import torch and the battery with the garbage collector paused, then freeze what the imports made: torch's
    import makes some 300,000 objects and sets off full collections that free nothing (0.1 to 0.2 s of every run),
    and frozen objects are never scanned again. Done only as the program: a process that calls main() keeps its
    collector as it was."""
    import gc

    if not gc.isenabled():
        return
    gc.disable()
    try:
        import tfcheck.engine.runner  # noqa: F401 - imports torch
        import tfcheck.ui.render  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def _check(args) -> int:
    from tfcheck.battery import all_checks
    from tfcheck.engine.runner import load_subject, run_model
    from tfcheck.model.facts import declarations as decl
    from tfcheck.model.facts.project_config import find_pyproject, models_to_run
    from tfcheck.report.report import Report
    from tfcheck.report.status import Status
    from tfcheck.ui.live import progress_line
    from tfcheck.ui.render import render_text

    all_checks()  # the engine runs the battery its front end loads
    cli = dict(decl.parse_assignment(text, "--set") for text in args.declarations)
    overrun = args.budget_overrun or ("fail" if args.strict else None)
    if overrun is not None and "budget_overrun" not in cli:  # a --set of it is the more explicit
        cli["budget_overrun"] = decl.parse_value("budget_overrun", overrun,
                                                 "--budget-overrun" if args.budget_overrun else "--strict")
    pyproject = find_pyproject(Path.cwd())
    from tfcheck.model.build.spec import import_target, is_file_target, model_file, resolve_attr, split_spec
    from tfcheck.model.facts.project_config import unique_specs

    given, repeated = unique_specs(list(args.specs) or ([] if args.all else list(REFERENCE_SPECS)))
    if repeated:
        print(f"tfcheck: {', '.join(sorted(set(repeated)))} given more than once: checked once", file=sys.stderr)
    runs = models_to_run(given, pyproject, include_all=args.all)
    if args.all and len(runs) == len(given):
        raise UsageError("--all: no [[tool.tfcheck.models]] entries in "
                         f"{pyproject or 'pyproject.toml (none found)'}")
    specs = list(dict.fromkeys(entry.spec for entry in runs))
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only is not None else None
    if only == []:
        raise UsageError(f"--only {args.only!r} names no check; give check ids separated by commas (tfcheck list)")
    if args.json == "":
        raise UsageError("--json needs a PATH (--json report.json)")
    if args.images and not args.json:
        raise UsageError("--images draws the leak maps next to the JSON report: give --json PATH too")
    json_path = writable_path(args.json, "--json") if args.json else None  # refused before the battery runs
    for spec in specs:  # every spec is found before the first battery runs
        target, attr = split_spec(spec)
        if is_file_target(target):
            model_file(target)  # a file is run once, when its model is loaded: here only its existence
        else:
            resolve_attr(import_target(target), target, attr)  # imported once: the loader reuses the module
    report = Report()
    try:
        for entry in runs:
            with progress_line(entry.label, shown=sys.stderr.isatty(),
                               styled=use_color(getattr(args, "color", "auto"), sys.stderr)):
                subject = load_subject(entry.spec, decl.merge(cli, entry.declared))
                subject.loaded.spec = entry.label  # one spec listed twice (two sizes) is told apart by its name
                report.models.append(run_model(subject, only))
    except KeyboardInterrupt:
        if json_path is not None:  # what finished is still worth having: the models checked before Ctrl-C
            write_report(json_path, report.to_json(), "--json")
            print(f"tfcheck: interrupted; the {len(report.models)} model(s) checked before it are in {json_path}",
                  file=sys.stderr)
        raise
    if json_path is not None:  # first: the files are the record, whatever happens to the terminal after
        write_report(json_path, report.to_json(), "--json")
        if args.images:
            _write_images(report, json_path)
    sys.stdout.write(render_text(report, width=_width(), color=use_color(args.color), verbose=args.verbose))
    if args.format == "github":
        from tfcheck.ui.annotations import github_annotations

        sys.stdout.write("".join(line + "\n" for line in github_annotations(report)))
    if any(f.status is Status.ERROR for m in report.models for f in m.findings()):
        return EXIT_ERROR
    return EXIT_FAIL if report.failed(strict=args.strict) else EXIT_OK


def _write_images(report, json_path: Path) -> None:
    from tfcheck.ui.leakmap import save_images

    folder = json_path.with_suffix("")  # report.json -> report/ beside it
    written = save_images(report, folder)
    has_maps = any("leak_map_data" in f.evidence for m in report.models for f in m.findings())
    if has_maps and not written:
        print("tfcheck: leak-map images need matplotlib: pip install 'tfcheck[images]'", file=sys.stderr)


def _list() -> int:
    from rich.markup import escape
    from rich.table import Table

    from tfcheck.battery import all_checks
    from tfcheck.model.facts.declarations import KEYS
    from tfcheck.ui.render import checks_view, to_string

    keys = Table(title=escape("declaration keys (--set KEY=VALUE, [[tool.tfcheck.models]], __tfcheck__)"))
    for col in ("key", "syntax", "meaning"):
        keys.add_column(col)
    for k in KEYS.values():
        keys.add_row(k.name, k.syntax, k.doc)
    sys.stdout.write(to_string(checks_view(all_checks()), width=_width()) + to_string(keys, width=_width()))
    return EXIT_OK


def _trace(args) -> int:
    from tfcheck.engine.runner import load_subject
    from tfcheck.model.facts import declarations as decl
    from tfcheck.tools.trace import trace_shapes
    from tfcheck.ui import views  # noqa: F401 - registers how a trace and an explanation print
    from tfcheck.ui.render import to_string

    cli = dict(decl.parse_assignment(text, "--set") for text in args.declarations)
    if args.meta:
        import torch

        with torch.device("meta"):  # construct without allocating: parameters are meta tensors
            subject = load_subject(args.spec, cli, meta_ok=True)
    else:
        subject = load_subject(args.spec, cli, meta_ok=True)
    inputs, kwargs = subject.make_inputs(3, subject.probe_length())
    trace = trace_shapes(subject.model, *inputs, device="meta" if args.meta else None, depth=args.depth,
                         forward_kwargs=kwargs)
    sys.stdout.write(to_string(trace, width=_width(), color=use_color(args.color)))
    if args.json:
        write_report(writable_path(args.json, "--json"), trace.to_json(), "--json")
    return EXIT_OK if trace.ok else EXIT_FAIL


def _explain(args) -> int:
    from tfcheck.explainers.explanation import explain_error
    from tfcheck.ui import views  # noqa: F401 - registers how an explanation prints
    from tfcheck.ui.render import to_string

    text = sys.stdin.read() if args.text == ["-"] else " ".join(args.text)
    explanation = explain_error(text, budget=args.budget)
    sys.stdout.write(to_string(explanation, width=_width(), color=use_color(args.color)))
    return EXIT_OK if explanation.matched else EXIT_FAIL


def _table(row_id: str | None, lang: str) -> int:
    from rich.text import Text

    from tfcheck.report import table
    from tfcheck.ui.render import row_view, table_view, to_string

    if row_id is None:
        sys.stdout.write(to_string(table_view(lang), width=_width()))
        return EXIT_OK
    rows = table.rows()
    if row_id not in rows:
        import difflib

        close = difflib.get_close_matches(row_id, rows, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(f"tfcheck table {row_id}: no troubleshooting row {row_id!r}{hint}; run `tfcheck table` "
                         "to list them")
    node = row_view(rows[row_id], lang)
    node.add(Text("checks: " + (", ".join(rows[row_id].checks) or "-"), style="dim"))
    node.add(Text("source: " + rows[row_id].source, style="dim"))
    sys.stdout.write(to_string(node, width=_width()))
    return EXIT_OK


def _help(topic: str | None) -> int:
    from tfcheck.ui.help_pages import page_text, topics_text

    sys.stdout.write(topics_text() if topic is None else page_text(topic))
    return EXIT_OK


def _depth(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a depth: give a whole number >= 0 (1: the model's "
                                         "direct children)")
    return int(text)


def _color_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the output (auto: when stdout is a terminal, unless NO_COLOR is set; "
                             "FORCE_COLOR=1 colours a pipe)")


def use_color(choice: str = "auto", stream: Any = None) -> bool:
    """--color, then NO_COLOR (https://no-color.org), then FORCE_COLOR, then whether the stream (stdout unless
    given: the progress line asks for stderr) is a terminal."""
    import os

    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return (stream or sys.stdout).isatty()


def _width() -> int:
    import shutil

    return max(80, shutil.get_terminal_size((100, 24)).columns)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
