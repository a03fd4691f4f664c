"""docs/models/huggingface-sweep.md is written by benchmarks/hf_sweep.py from a real run (never here: the sweep
takes many minutes); it carries a fingerprint of the script, the tfcheck/transformers/torch versions and the
class list, recomputed here, so a page older than any of them fails with the command that rewrites it."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RERUN = "nohup nice -n 19 python benchmarks/hf_sweep.py --jobs 1 > /tmp/hf_sweep.log 2>&1 &"


@pytest.fixture(scope="module")
def script():
    pytest.importorskip("transformers")  # its version and its class list are part of the fingerprint
    spec = importlib.util.spec_from_file_location("hf_sweep", ROOT / "benchmarks" / "hf_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def test_the_page_is_written_from_the_current_script_versions_and_classes(script):
    stated = script.stated_fingerprint(script.PAGE.read_text("utf-8"))
    assert stated == script.fingerprint(), f"docs/models/huggingface-sweep.md is stale: run {RERUN}"


def test_the_page_names_every_mapped_class(script):
    text = script.PAGE.read_text("utf-8")
    missing = [c.name for c in script.candidates() if f"`{c.name}`" not in text]
    assert not missing, f"not on the page (swept, skipped or listed as not swept): {missing[:10]}"


def test_the_fingerprint_follows_the_class_list_and_the_versions(script, monkeypatch):
    before = script.fingerprint()
    listed = script.candidates()
    monkeypatch.setattr(script, "candidates", lambda: listed[1:])
    assert script.fingerprint() != before
    monkeypatch.setattr(script, "candidates", lambda: listed)
    monkeypatch.setattr(script, "versions", lambda: {"tfcheck": "0", "transformers": "0", "torch": "0"})
    assert script.fingerprint() != before
