"""The corpus extra installs beside the CPU torch the suite is run with: a dry run of README.md's second set-up
command resolves without replacing torch (a corpus package that admits a newer torch would otherwise pull a
multi-GB CUDA build), and every corpus package is pinned."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from corpus import CORPUS

ROOT = Path(__file__).resolve().parents[2]
#: what pip says when it cannot reach the index: the test is then skipped, with pip's words as the reason
UNREACHABLE = re.compile(r"Failed to establish a new connection|Network is unreachable|Temporary failure in name "
                         r"resolution|No address associated|Could not fetch URL|ProxyError|ConnectTimeout")
TORCH = "2.13.0"


def torch_changes(report: dict, installed: str | None) -> list[str]:
    """What a pip --report would do to torch: each install of torch other than leaving the installed one."""
    changes = []
    for item in report.get("install", []):
        name, version = item["metadata"]["name"].lower(), item["metadata"]["version"]
        if name != "torch":
            continue
        if installed is not None or version.split("+")[0] != TORCH:
            changes.append(f"torch {installed or '(none)'} -> {version}")
    return changes


def test_a_resolution_that_would_replace_torch_is_told_apart():
    upgrade = {"install": [{"metadata": {"name": "torch", "version": "2.14.1"}}]}
    fresh = {"install": [{"metadata": {"name": "torch", "version": "2.13.0+cpu"}}]}
    assert torch_changes(upgrade, None) == ["torch (none) -> 2.14.1"]
    assert torch_changes(upgrade, "2.13.0+cpu") and torch_changes(fresh, "2.13.0+cpu")  # any reinstall is a change
    assert torch_changes(fresh, None) == [] and torch_changes({"install": []}, "2.13.0+cpu") == []


def test_every_corpus_package_is_pinned_in_the_corpus_extra():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]["corpus"]
    pins = dict(line.split("==") for line in extra)
    assert len(pins) == len(extra), extra  # every line an == pin
    assert {m.package for m in CORPUS.values()} | {"transformers"} == set(pins)
    assert f"torch=={TORCH}" in (ROOT / "constraints.txt").read_text("utf-8").split()


def test_the_corpus_extra_installs_without_changing_torch():
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
               "-c", "constraints.txt", "-e", ".[test,corpus]"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and (reason := UNREACHABLE.search(done.stderr)):
        pytest.skip(f"the package index is unreachable: {reason.group(0)}")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{"):])
    try:
        installed = metadata.version("torch")
    except metadata.PackageNotFoundError:
        installed = None
    assert not torch_changes(report, installed), torch_changes(report, installed)


def _commands(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("pip install")]


def test_ci_runs_the_set_up_commands_readme_opens_with_and_they_install_the_corpus_under_the_constraints():
    readme = (ROOT / "README.md").read_text("utf-8")
    first_block = readme[readme.index("```console"):].split("```")[1]
    assert _commands((ROOT / ".ci" / "run").read_text("utf-8")) == _commands(first_block)
    assert any("-c constraints.txt" in line and "corpus" in line for line in _commands(first_block)), first_block
