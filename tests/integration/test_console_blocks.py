"""Every console block in README.md and docs/ is what its commands print: each ``$ tfcheck ...`` (or ``python -m
tfcheck``) line is run in-process, each ``$ pytest ...`` and ``$ python ...`` line in a subprocess, from the
repository root (or the folder a ``<!-- console: in DIR -->`` line above the block names) at 100 columns with colour
off, and the lines under it must be its output (``...`` stands for any lines left out; seconds, pytest's session
header and the repository's absolute path are normalised). ``$ echo $?`` shows the exit code of the command before
it. A command shown without output must still not be refused (exit 2) or break tfcheck (exit 3).

A block that cannot run here says why on the line above it: ``<!-- console: not run: REASON -->`` (a pip install, a
command on your own file, minutes of training). ``TFCHECK_UPDATE_DOCS=1 pytest
tests/integration/test_console_blocks.py`` rewrites the outputs from a real run, keeping each ``...`` elision
(``=full``: whole, to cut anew)."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tfcheck import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^(?:<!-- console: (?:not run: (?P<reason>.+?)|in (?P<cwd>\S+)) -->\n)?"
                   r"```console\n(?P<body>.*?)^```$", re.M | re.S)
RUNNABLE = re.compile(r"^(tfcheck|python|pytest)( |$)")
#: pytest's session header: machine-specific, and no part of what tfcheck prints
PYTEST_HEADER = re.compile(r"^(=+ test session starts =+|platform .*|rootdir: .*|configfile: .*|plugins: .*|"
                           r"cachedir: .*|hypothesis profile .*|benchmark: .*|Using --randomly-seed.*)$")
UPDATE = os.environ.get("TFCHECK_UPDATE_DOCS") in ("1", "full")
#: TFCHECK_UPDATE_DOCS=full writes every output whole, its elisions dropped (to cut anew by hand)
WHOLE = os.environ.get("TFCHECK_UPDATE_DOCS") == "full"
WIDTH = "100"
#: The repository as the commands of a block that runs in a copy import it: a link whose path is as long on every
#: machine, so that a path into the repository printed in a wrapped line wraps alike wherever the checkout lies
#: (one link per checkout: two checkouts' runs on one machine do not share it).
LINK = Path("/tmp") / f"tfcheck-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:6]}"


@dataclass
class Command:
    line: str
    shown: list[str] = field(default_factory=list)


@dataclass
class Block:
    page: Path
    lineno: int
    reason: str | None
    cwd: Path
    commands: list[Command]
    start: int  # offsets of the block's body in the page
    end: int

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.lineno}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text("utf-8")
        for m in BLOCK.finditer(text):
            commands: list[Command] = []
            for line in m.group("body").splitlines():
                if line.startswith("$ "):
                    commands.append(Command(line[2:]))
                elif commands:
                    commands[-1].shown.append(line)
            found.append(Block(page, text.count("\n", 0, m.start("body")), m.group("reason"),
                               ROOT / (m.group("cwd") or "."), commands, m.start("body"), m.end("body")))
    return found


def paths(line: str) -> str:
    """A line with this machine's folders taken out: the repository, and the temporary copy a block runs in."""
    line = re.sub(r"/\S*/pytest-of-\w+/pytest-\d+/(?:popen-gw\d+/)?[^/\s]+", "<tmp>", line)  # xdist or not
    line = line.replace(str(LINK) + os.sep, "")
    return line.replace(str(ROOT) + os.sep, "").replace(str(ROOT), "<repository>").rstrip()


def normal(line: str) -> str:
    line = paths(line)
    line = re.sub(r"\s*<?\d+(\.\d+)? s\b", " N s", line)  # a time column is right-aligned: '<0.01 s' or ' 0.2 s'
    line = re.sub(r"\bin \d+\.\d+s\b", "in Ns", line)
    # pytest centres its session lines in '=': a run of 10 s or more takes one '=' less
    return re.sub(r"^=+ (.*) =+$", r"== \1 ==", line)


def run(command: str, previous_exit: int | None, cwd: Path) -> tuple[list[str], int | None]:
    if command == "echo $?":
        return [str(previous_exit)], previous_exit
    args = shlex.split(command)
    if args[0] in ("pytest", "python") and args[:3] != ["python", "-m", "tfcheck"]:
        return run_process(args, cwd)
    args = args[3:] if args[:3] == ["python", "-m", "tfcheck"] else args[1:]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = cli.main(args)
        except SystemExit as exc:  # --help, --version, argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return out.getvalue().splitlines(), code


#: Variables a CI service sets that change what pytest prints (with one set, its short summary lines are not cut at
#: the terminal's width); the pages show a run in a terminal. PYTEST_* would be this run's own xdist worker's.
ON_CI = ("CI", "BUILD_NUMBER")


def run_process(args: list[str], cwd: Path) -> tuple[list[str], int]:
    argv = [sys.executable, "-m", "pytest", *args[1:]] if args[0] == "pytest" else [sys.executable, *args[1:]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k not in ON_CI}
    root = ROOT if cwd == ROOT else repository_link()
    env.update(COLUMNS=WIDTH, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=300, check=False)
    printed = (done.stdout + done.stderr).splitlines()
    return [line for line in printed if not PYTEST_HEADER.match(line)], done.returncode


def repository_link() -> Path:
    """LINK, made if missing (xdist's workers may race to make it)."""
    if not LINK.is_symlink():
        with contextlib.suppress(FileExistsError):
            LINK.symlink_to(ROOT, target_is_directory=True)
    assert LINK.resolve() == ROOT, f"{LINK} points elsewhere: remove it"
    return LINK


#: How much earlier or later a line cut at the terminal's width may be cut: a path in it is as long as the
#: checkout's folder, which differs between machines, and only that folder is taken out afterwards.
CUT_SLACK = 24


def line_pattern(shown: str) -> str:
    """A line as a regex; one that ends cut (``…``) also matches the same line cut up to CUT_SLACK characters
    earlier, or later."""
    line = normal(shown)
    if not line.endswith("…") or len(line) <= CUT_SLACK:
        return re.escape(line)
    kept, rest = line[:-1 - CUT_SLACK], line[-1 - CUT_SLACK:-1]
    optional = ""
    for char in reversed(rest):
        optional = f"(?:{re.escape(char)}{optional})?"
    return re.escape(kept) + optional + "[^\n]*…"


def matches(shown: list[str], printed: list[str]) -> bool:
    """``shown`` is ``printed`` with ``...`` lines standing for any run of lines."""
    pattern = "\n".join(line_pattern(s) if s.strip() != "..." else "(?:.*\n)*?.*" for s in shown)
    return re.fullmatch(pattern, "\n".join(normal(p) for p in printed)) is not None if shown else True


def elided(shown: list[str], printed: list[str]) -> list[str]:
    """The real output, cut where the page cut it: as many head lines as it showed before its first ``...``."""
    if WHOLE or not any(s.strip() == "..." for s in shown):
        return printed
    head = next(i for i, s in enumerate(shown) if s.strip() == "...")
    tail = len(shown) - 1 - max(i for i, s in enumerate(shown) if s.strip() == "...")
    if head + tail >= len(printed):
        return printed
    return printed[:head] + ["..."] + (printed[len(printed) - tail:] if tail else [])


RUN = [b for b in blocks() if b.reason is None]


def test_every_console_block_runs_or_says_why_not():
    for block in blocks():
        if block.reason is None:
            assert block.commands, f"{block.id}: a console block without `$ ` lines: mark it not run, with the reason"
            for command in block.commands:
                assert RUNNABLE.match(command.line) or command.line == "echo $?", (
                    f"{block.id}: `$ {command.line}` cannot be run by this test: mark the block with "
                    "<!-- console: not run: REASON --> on the line above it")


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_a_console_block_is_what_its_commands_print(block, monkeypatch, tmp_path):
    cwd = ROOT
    if block.cwd != ROOT:  # a copy: what the commands write (a report, pytest's cache) stays out of the repository
        cwd = tmp_path / block.cwd.name
        shutil.copytree(block.cwd, cwd)
        monkeypatch.syspath_prepend(str(cwd))
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("COLUMNS", WIDTH)
    for name in ("FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    code = None
    outputs, codes = [], []
    for command in block.commands:
        printed, code = run(command.line, code, cwd)
        outputs.append(printed)
        codes.append(code)
    if UPDATE:
        rewrite(block, outputs)
        return
    for command, printed, code in zip(block.commands, outputs, codes):
        if not command.shown:
            assert code not in (2, 3), f"{block.id}: `$ {command.line}` exits {code}:\n" + "\n".join(printed)
        assert matches(command.shown, printed), (
            f"{block.id}: `$ {command.line}` prints\n" + "\n".join(printed)
            + "\n(TFCHECK_UPDATE_DOCS=1 pytest tests/integration/test_console_blocks.py rewrites the page)")


FILE_BLOCK = re.compile(r"^<!-- file: (?P<path>\S+) -->\n```\w*\n(?P<body>.*?)^```$", re.M | re.S)


def test_a_file_shown_on_a_page_is_the_file_its_commands_run_on():
    shown = [(page, m) for page in PAGES for m in FILE_BLOCK.finditer(page.read_text("utf-8"))]
    assert shown
    for page, m in shown:
        assert (ROOT / m.group("path")).read_text("utf-8") == m.group("body"), (
            f"{page.relative_to(ROOT)}: the block marked <!-- file: {m.group('path')} --> differs from that file")


def rewrite(block: Block, outputs: list[list[str]]) -> None:
    text = block.page.read_text("utf-8")
    current = blocks_at(block.page, block.lineno)
    body = "".join(f"$ {c.line}\n" + "".join(line + "\n" for line in shown_anew(c.shown, printed))
                   for c, printed in zip(current.commands, outputs))
    block.page.write_text(text[:current.start] + body + text[current.end:], "utf-8")


def shown_anew(shown: list[str], printed: list[str]) -> list[str]:
    """What the page shows of a command after a rewrite: its lines as they are where they still match (a rewrite
    does not churn timings), else the real output, cut where the page cut it."""
    if not shown:
        return []
    if not WHOLE and matches(shown, printed):
        return shown
    return [paths(line) for line in elided(shown, printed)]


def blocks_at(page: Path, lineno: int) -> Block:
    """The block at ``lineno`` as the page is now (an earlier rewrite of the same page moved the offsets)."""
    mine = [b for b in blocks() if b.page == page]
    index = [b.lineno for b in RUN if b.page == page].index(lineno)
    return [b for b in mine if b.reason is None][index]
