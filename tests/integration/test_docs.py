"""The user documentation in docs/*.md: its Python examples run, it names every check, table row,
declaration key, CLI option and plugin option, and its console examples call real subcommands."""
from __future__ import annotations

import argparse
import inspect
import re
import shlex
from pathlib import Path

import pytest

from tfcheck import battery, cli, plugin
from tfcheck.model.facts import declarations
from tfcheck.report import table

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.rglob("*.md"))  # docs/models/ too
FENCE = re.compile(r"^([ \t]*)```([\w-]*)[ \t]*\n(.*?)^\1```[ \t]*$", re.M | re.S)


def blocks(lang: str) -> list[tuple[str, int, str]]:
    """(page name, line number, dedented code) of every fenced block of ``lang``."""
    out = []
    for page in PAGES:
        text = page.read_text("utf-8")
        for m in FENCE.finditer(text):
            if m.group(2) == lang:
                indent = len(m.group(1))
                code = "\n".join(line[indent:] for line in m.group(3).splitlines())
                out.append((page.name, text.count("\n", 0, m.start()) + 1, code))
    return out


def all_text() -> str:
    return "\n".join(p.read_text("utf-8") for p in PAGES)


def test_the_pages_exist():
    names = {p.name for p in PAGES}
    assert {"index.md", "checks.md", "troubleshooting.md", "declarations.md", "pytest-plugin.md", "cli.md",
            "api.md", "report-schema.md", "reference-model.md"} <= names


def test_relative_links_point_at_files():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text("utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


PYTHON_BLOCKS = blocks("python")


@pytest.mark.parametrize("page,line,code", PYTHON_BLOCKS, ids=[f"{p}:{n}" for p, n, _ in PYTHON_BLOCKS])
def test_python_block_runs(page, line, code, tmp_path, monkeypatch, capsys):
    """Each block runs in a fresh namespace in an empty directory; test_* functions it defines are called
    (parametrized ones once per parameter), as pytest would."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{Path(page).stem.replace('-', '_')}_{line}"}
    exec(compile(code, f"docs/{page}:{line}", "exec"), namespace)
    for name, fn in list(namespace.items()):
        if name.startswith("test_") and inspect.isfunction(fn):
            for kwargs in _parametrized(fn):
                fn(**kwargs)


def _parametrized(fn) -> list[dict]:
    calls = [{}]
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "parametrize":
            names, values = mark.args[0], mark.args[1]
            names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
            values = [v if len(names) > 1 else (v,) for v in values]
            calls = [{**c, **dict(zip(names, v))} for c in calls for v in values]
    return calls


def test_there_are_runnable_examples():
    assert len(PYTHON_BLOCKS) >= 8


def _mentioned(name: str, text: str) -> bool:
    return re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])", text) is not None


def test_every_check_id_is_documented():
    text = all_text()
    checks_page = (DOCS / "checks.md").read_text("utf-8")
    for chk in battery.all_checks():
        assert _mentioned(chk.id, text), chk.id
        # Each check has its own section, on checks.md or on its family's page; checks.md lists them all.
        assert f"## `{chk.id}`" in text, f"no docs page has a section for {chk.id}"
        assert chk.title in checks_page, f"checks.md does not give the title of {chk.id}"


def test_every_table_row_is_documented():
    page = " ".join((DOCS / "troubleshooting.md").read_text("utf-8").split())  # lines are wrapped
    for row in table.rows().values():
        assert f"### `{row.id}`" in page, f"troubleshooting.md has no section for {row.id}"
        assert row.symptom in page, row.id
        if row.source != "tfcheck":  # the rows from the source article keep their Chinese wording
            for text in (row.symptom_zh, *row.causes_zh, *row.fixes_zh):
                assert text in page, f"{row.id}: {text}"


def test_every_declaration_key_is_documented():
    page = (DOCS / "declarations.md").read_text("utf-8")
    for key in declarations.KEYS:
        assert f"| `{key}` |" in page, f"declarations.md has no table line for {key}"


def _cli_options() -> dict[str, set[str]]:
    """Subcommand ('' for the top level) -> its option strings, from the real parser."""
    parser = cli.build_parser()
    out = {"": {s for a in parser._actions for s in a.option_strings}}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = {s for a in sub._actions for s in a.option_strings}
    return out


def _plugin_options() -> set[str]:
    seen: set[str] = set()

    class Group:
        def addoption(self, *names, **kwargs):
            seen.update(names)

    class Parser:
        def getgroup(self, *args, **kwargs):
            return Group()

        def addini(self, *args, **kwargs):  # ini keys: pytest-plugin.md's own table
            pass

    plugin.pytest_addoption(Parser())
    return seen


def test_every_cli_option_is_documented():
    page = (DOCS / "cli.md").read_text("utf-8")
    options = _cli_options()
    assert {"check", "list", "table"} <= set(options)
    for command, opts in options.items():
        if command:
            assert f"tfcheck {command}" in page, command
        for opt in opts - {"-h", "--help"}:
            assert _mentioned(opt, page), f"cli.md does not mention {command} {opt}"


def test_every_plugin_option_is_documented():
    page = (DOCS / "pytest-plugin.md").read_text("utf-8")
    options = _plugin_options()
    assert {"--tfcheck", "--tfcheck-all", "--tfcheck-set", "--tfcheck-strict", "--tfcheck-json"} <= options
    for opt in options:
        assert f"| `{opt}" in page, f"pytest-plugin.md has no table line for {opt}"


def _console_commands(program: str) -> list[tuple[str, int, list[str]]]:
    out = []
    for page, line, code in blocks("console"):
        for text in code.splitlines():
            if text.startswith(f"$ {program}"):
                argv = shlex.split(text[2:])
                if argv[0] == program:
                    out.append((page, line, argv[1:]))
    return out


def test_console_tfcheck_lines_name_real_subcommands_and_options():
    commands = _console_commands("tfcheck")
    assert len(commands) >= 10
    subcommands = set(_cli_options()) - {""}
    parser = cli.build_parser()
    for page, line, argv in commands:
        if argv in (["--help"], ["-h"]):
            continue
        assert argv and argv[0] in subcommands, f"{page}:{line}: tfcheck {' '.join(argv)}"
        try:
            parser.parse_args(argv)
        except SystemExit:  # argparse reports an unknown option or a bad choice this way
            pytest.fail(f"{page}:{line}: `tfcheck {' '.join(argv)}` is not accepted by the parser")


def test_console_python_m_tfcheck_lines_name_real_subcommands():
    subcommands = set(_cli_options()) - {""}
    for page, line, code in blocks("console"):
        for text in code.splitlines():
            if text.startswith("$ python -m tfcheck"):
                argv = shlex.split(text[2:])[3:]
                assert not argv or argv[0] in subcommands | {"--help", "-h"}, f"{page}:{line}: {text}"


def test_console_pytest_lines_use_real_plugin_options():
    options = _plugin_options()
    commands = _console_commands("pytest")
    assert commands
    for page, line, argv in commands:
        for arg in argv:
            name = arg.split("=")[0]
            if name.startswith("--tfcheck"):
                assert name in options, f"{page}:{line}: unknown plugin option {name}"


# ----- outputs shown in the docs come from a real run ----------------------------------------------------------
#: ``<!-- output of: tfcheck ARGS -->`` right above a ```text block: every line of the block must be a line of
#: what ``tfcheck ARGS`` prints when run from the repository root (spaces collapsed; seconds and per-check costs
#: are not compared), so a page cannot drift from what the tool says.
OUTPUT_OF = re.compile(r"<!-- output of: tfcheck (.+?) -->\s*\n```text\n(.*?)^```", re.M | re.S)
ROOT = DOCS.parent


def documented_outputs() -> list[tuple[str, int, str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text("utf-8")
        for m in OUTPUT_OF.finditer(text):
            found.append((page.name, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)))
    return found


def _normal(line: str) -> str:
    line = re.sub(r"\d+ fwd, \d+ tok", "", line)
    line = re.sub(r"\s<?\d+(\.\d+)? s$", "", line.rstrip())  # a check line's cost column
    line = re.sub(r"\d+\.\d+ s\b", "N s", line)
    return " ".join(line.split())


@pytest.mark.parametrize("page,line,args,shown", documented_outputs(),
                         ids=[f"{p}:{n}" for p, n, _, _ in documented_outputs()])
def test_a_documented_output_is_what_the_command_prints(page, line, args, shown, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: a line of the page is a line of the output
    cli.main(shlex.split(args))
    printed = {_normal(out) for out in capsys.readouterr().out.splitlines()}
    for text in shown.splitlines():
        if text.strip() and text.strip() != "...":
            assert _normal(text) in printed, f"docs/{page}:{line}: `tfcheck {args}` no longer prints {text.strip()!r}"


def test_there_are_documented_outputs():
    assert len(documented_outputs()) >= 3
