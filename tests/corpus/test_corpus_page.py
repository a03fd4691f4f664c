"""docs/models/corpus.md is written by benchmarks/corpus_page.py from a real run; it carries a fingerprint of the
script, the corpus definition, the installed package versions and the model list, recomputed here: a page older
than any of them fails, with the command that rewrites it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from corpus import CORPUS, DROPPED

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("corpus_page", ROOT / "benchmarks" / "corpus_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_written_from_the_current_corpus():
    missing = sorted({m.package for m in CORPUS.values() if m.version is None})
    if missing:  # the versions are part of the fingerprint
        pytest.skip(f"the corpus extra is not installed ({', '.join(missing)}): pip install -c constraints.txt "
                    "-e '.[test,corpus]'")
    script = _script()
    stated = script.stated_fingerprint(script.PAGE.read_text("utf-8"))
    assert stated == script.fingerprint(), "docs/models/corpus.md is stale: run python benchmarks/corpus_page.py"


def test_the_page_lists_every_model_and_every_package_left_out():
    text = (ROOT / "docs" / "models" / "corpus.md").read_text("utf-8")
    for name, member in CORPUS.items():
        assert f"| {name} | {member.package}==" in text, name
    for package in DROPPED:
        assert f"| {package} |" in text, package


def test_the_fingerprint_follows_what_the_page_depends_on(monkeypatch):
    script = _script()
    before = script.fingerprint()
    name = next(iter(CORPUS))
    monkeypatch.setitem(script.CORPUS, name, type(CORPUS[name])(CORPUS[name].package, CORPUS[name].module,
                                                                CORPUS[name].spec, {"kind": "decoder"}))
    assert script.fingerprint() != before
