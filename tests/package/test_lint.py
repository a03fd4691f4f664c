"""The linter and the type checker, run as tests so that CI
(``.ci/run``: ``pip install -c constraints.txt -e ".[test,corpus]" && pytest``) runs them: ``ruff check``
over the sources and tests, ``mypy`` over the package, both with the settings of ``pyproject.toml``
([tool.ruff], [tool.mypy]).

ruff and mypy are declared in the ``test`` extra: a missing tool fails here (``No module named ruff``), it is
never skipped.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: what CONTRIBUTING.md runs, from the repository root
RUFF = [sys.executable, "-m", "ruff", "check", "tfcheck", "tests", "benchmarks", "reference_model"]
MYPY = [sys.executable, "-m", "mypy", "tfcheck"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _shown(done: subprocess.CompletedProcess[str]) -> str:
    command = " ".join(["python", *done.args[1:]])
    return f"`{command}` exited {done.returncode}:\n{done.stdout}{done.stderr}"


def test_ruff_check_is_clean() -> None:
    done = _run(RUFF)
    code = done.returncode
    assert code == 0, _shown(done)


def test_mypy_is_clean() -> None:
    done = _run(MYPY)
    code = done.returncode
    assert code == 0, _shown(done)
