"""CONTRIBUTING.md's "How to add a check", walked end to end: the package and the gallery are copied to a
temporary folder, the guide's example check, table row and broken variant are added to the copy exactly as
the guide writes them, and the command line of the copy (in a subprocess, so nothing is registered here)
lists the new check and runs it on the reference model (a pass) and on the variant (a warning, with its row).

The guide marks each block it means to be added with an HTML comment just above it,
``<!-- new file: PATH -->`` or ``<!-- append to: PATH -->``, PATH relative to the repository root.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "CONTRIBUTING.md"
BLOCK = re.compile(r"^<!-- (new file|append to): (\S+) -->[ \t]*\n```(\w+)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
COPIED = ("tfcheck", "reference_model")


def guide_blocks() -> list[tuple[str, str, str, str]]:
    """(mode, path, language, code) of every block the guide marks to be added."""
    return [(m.group(1), m.group(2), m.group(3), m.group(4)) for m in BLOCK.finditer(GUIDE.read_text("utf-8"))]


def _one(pattern: str, text: str) -> str:
    found = re.findall(pattern, text, re.M)
    assert len(found) == 1, (pattern, found)
    return found[0]


def test_the_guide_marks_a_check_a_row_and_a_variant():
    blocks = guide_blocks()
    paths = [path for _, path, _, _ in blocks]
    assert len(blocks) == 3, paths
    (check_mode, check_path, check_lang, check_code), (row_mode, row_path, row_lang, _), \
        (variant_mode, variant_path, variant_lang, _) = blocks
    family = _one(r"^tfcheck/checks/(\w+)/\w+\.py$", check_path)
    assert (check_mode, check_lang) == ("new file", "python")
    assert not (REPO / check_path).exists(), f"the guide's example {check_path} is a real module now: pick another"
    assert (row_mode, row_lang, row_path) == ("append to", "toml", f"tfcheck/data/table/{family}.toml")
    assert (variant_mode, variant_lang) == ("append to", "python")
    assert variant_path.startswith("reference_model/broken/")
    assert "@check(" in check_code and "Finding(" in check_code


@pytest.fixture(scope="module")
def walked(tmp_path_factory) -> dict:
    """The copy with the guide's blocks added, and what its command line printed."""
    blocks = guide_blocks()
    root = tmp_path_factory.mktemp("contributing")
    for name in COPIED:
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for mode, path, _, code in blocks:
        target = root / path
        if mode == "new file":
            assert not target.exists(), path
            target.write_text(code, "utf-8")
        else:
            assert target.exists(), path
            before = target.read_text("utf-8")
            target.write_text(before.rstrip("\n") + "\n\n\n" + code, "utf-8")
    check_code = blocks[0][3]
    check_id = _one(r'^ID = "([\w.]+)"$', check_code)
    row_id = _one(r'^id = "([\w-]+)"$', blocks[1][3])
    variant = _one(r"^class (\w+)\(", blocks[2][3])

    run_in = root / "elsewhere"  # an empty working directory: the repository's own tfcheck is not importable
    run_in.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "COLUMNS": "250", "NO_COLOR": "1"}
    env.pop("PYTHONSTARTUP", None)
    report_path = root / "report.json"
    commands = {
        "where": [sys.executable, "-c", "import importlib.util as u; "  # finds, without importing torch
                  "print(u.find_spec('tfcheck').origin); print(u.find_spec('reference_model').origin)"],
        "list": [sys.executable, "-m", "tfcheck", "list"],
        "check": [sys.executable, "-m", "tfcheck", "check", "reference_model:TransformerLM",
                  f"reference_model.broken:{variant}", "--only", check_id, "--json", str(report_path)],
    }
    running = {name: subprocess.Popen(argv, cwd=run_in, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for name, argv in commands.items()}  # in parallel: seconds
    done = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=300)
        done[name] = (process.returncode, out, err)
    return {"root": root, "check_id": check_id, "row_id": row_id, "variant": variant, "runs": done,
            "report": json.loads(report_path.read_text("utf-8")) if report_path.exists() else None}


def test_the_subprocess_runs_the_copy(walked):
    rc, out, err = walked["runs"]["where"]
    assert rc == 0, err
    package, gallery = out.split()
    assert Path(package).resolve() == (walked["root"] / "tfcheck" / "__init__.py").resolve()
    assert Path(gallery).resolve() == (walked["root"] / "reference_model" / "__init__.py").resolve()


def test_the_new_check_is_listed(walked):
    rc, out, err = walked["runs"]["list"]
    assert rc == 0, err
    assert walked["check_id"] in out and walked["row_id"] in out, out


def test_the_new_check_runs_on_the_reference_model_and_catches_the_variant(walked):
    rc, out, err = walked["runs"]["check"]
    assert rc == 0, f"exit {rc}\n{out}\n{err}"  # a warning is no failure without --strict
    report = walked["report"]
    assert report is not None, err
    by_spec = {m["spec"]: m for m in report["models"]}
    assert set(by_spec) == {"reference_model:TransformerLM", f"reference_model.broken:{walked['variant']}"}, by_spec
    for spec, status in [("reference_model:TransformerLM", "pass"), (f"reference_model.broken:{walked['variant']}",
                                                                     "warn")]:
        results = {r["check"]: r for r in by_spec[spec]["checks"]}
        assert walked["check_id"] in results, (spec, list(results))
        result = results[walked["check_id"]]
        assert result["status"] == status, (spec, result)
        rows = {f["row"] for f in result["findings"] if f["status"] == status}
        assert rows == ({walked["row_id"]} if status == "warn" else {None}), (spec, result)
