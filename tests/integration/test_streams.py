"""Output that cannot fail (issue 35, first class): every subcommand, and pytest --tfcheck, on a terminal whose
encoding is ASCII or latin-1 (PYTHONIOENCODING, a CI runner without a UTF-8 locale) prints its report with the
characters it cannot encode spelled in ASCII, exits as it does on UTF-8, and writes its JSON report (UTF-8) first."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfcheck.ui.streams import spelled

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "reference_model.broken:AttentionScaledByDModel"  # its finding reads "divided by √d_model"


def _run(args: list[str], encoding: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": encoding, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, encoding="utf-8", errors="strict",
                          env=env, cwd=cwd, timeout=300)


def test_a_character_the_stream_cannot_encode_is_spelled_in_ascii():
    text = "divided by √d_model … 2 × 3 → ok"
    assert text.encode("ascii", errors="tfcheck-ascii").decode() == "divided by sqrt d_model ... 2 x 3 -> ok"
    assert "中".encode("ascii", errors="tfcheck-ascii") == b"?"
    with pytest.raises(UnicodeDecodeError):
        spelled(UnicodeDecodeError("ascii", b"\xff", 0, 1, "not an encode error"))


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_check_prints_its_report_and_writes_its_json_first_on_a_terminal_that_cannot_show_it(encoding, tmp_path):
    out = tmp_path / "report.json"
    done = _run(["-m", "tfcheck", "check", BROKEN, "--json", str(out)], encoding)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "divided by sqrt d_model" in done.stdout
    assert "√" in out.read_text(encoding="utf-8") and json.loads(out.read_text(encoding="utf-8"))["models"]


@pytest.mark.parametrize("args", [["list"], ["table"], ["help", "declarations"], ["explain", "attention-scale-wrong"],
                                  ["trace", "reference_model:TransformerLM"]], ids=lambda a: a[0])
def test_every_other_subcommand_prints_on_an_ascii_terminal_as_it_exits_on_utf8(args):
    ascii_run, utf8_run = _run(["-m", "tfcheck", *args], "ascii"), _run(["-m", "tfcheck", *args], "utf-8")
    assert "Traceback" not in ascii_run.stderr, ascii_run.stderr[-2000:]
    assert ascii_run.returncode == utf8_run.returncode and ascii_run.stdout.isascii() and ascii_run.stdout.strip()


def test_pytest_tfcheck_prints_readable_failures_on_an_ascii_terminal(tmp_path):
    done = _run(["-m", "pytest", "--tfcheck", BROKEN, "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
                "ascii", cwd=tmp_path)
    assert done.returncode == 1 and "INTERNALERROR" not in done.stdout + done.stderr, done.stdout[-2000:]
    assert "divided by sqrt d_model" in done.stdout and "\\u221a" not in done.stdout
