"""The snapshot harness: the JSON report of every model tfcheck is proven on (the reference models, every
broken variant of the gallery, every model family), normalised so that only what a check decided is kept,
and compared with the copy stored in tests/snapshots/. It is the regression gate of every change that moves
code or adds an inference rule: a report that changes is a diff to read and explain, never noise.

    # rewrite the stored copies, then read the diff:
    TFCHECK_UPDATE_SNAPSHOTS=1 pytest tests/integration/test_snapshots.py
"""
from __future__ import annotations

import json
import os
import re
import site
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tfcheck

STORE = Path(__file__).resolve().parents[1] / "snapshots"
REPO = Path(__file__).resolve().parents[2]
UPDATE = os.environ.get("TFCHECK_UPDATE_SNAPSHOTS") == "1"


def subjects() -> dict[str, Callable[[], Any]]:
    """name -> a call that returns the subject's tfcheck.Report."""
    from families import FAMILIES, report_of
    from reference_model import broken

    found: dict[str, Callable[[], Any]] = {}
    for name in ("TransformerEncoder", "TransformerLM", "Seq2SeqTransformer"):
        found[f"reference-{name}"] = lambda spec=f"reference_model:{name}": tfcheck.run_checks(spec)
    for variant in broken.VARIANTS:
        found[f"broken-{variant.__name__}"] = lambda v=variant: tfcheck.run_checks(v)
    for name, family in FAMILIES.items():
        found[f"family-{name}"] = lambda f=family: report_of(f)
    return found


def _places() -> list[tuple[str, str]]:
    """Paths that differ between checkouts and machines, longest first, with the name that replaces them."""
    places = [(str(REPO), "<repo>"), (sys.prefix, "<prefix>")]
    places += [(p, "<site>") for p in site.getsitepackages() + [site.getusersitepackages()]]
    return sorted(places, key=lambda p: -len(p[0]))


def _without_places(text: str) -> str:
    for path, name in _places():
        text = text.replace(path, name)
    return re.sub(r"0x[0-9a-f]{6,}", "0x…", text)


def _drop_seconds(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_drop_seconds(v) for v in value]
    return value


def normalised(report: Any) -> dict[str, Any]:
    """The report as JSON, without what no check decides: seconds, paths of this checkout, object addresses,
    the order in which assumptions were stated (a multiset)."""
    data = _drop_seconds(json.loads(_without_places(report.to_json())))
    for model in data["models"]:
        model["assumptions"] = sorted(model["assumptions"], key=lambda a: json.dumps(a, sort_keys=True))
    return data


def stored_path(name: str) -> Path:
    return STORE / f"{name}.json"


def assert_same(name: str, report: Any) -> None:
    """The report matches its stored snapshot; a missing snapshot fails unless TFCHECK_UPDATE_SNAPSHOTS=1."""
    now = normalised(report)
    path = stored_path(name)
    if UPDATE:
        path.write_text(json.dumps(now, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        return
    assert path.exists(), (f"no snapshot {path}: run "
                           "TFCHECK_UPDATE_SNAPSHOTS=1 pytest tests/integration/test_snapshots.py")
    before = json.loads(path.read_text(encoding="utf-8"))
    assert now == before, _diff(before, now)


def _diff(before: dict[str, Any], now: dict[str, Any]) -> str:
    import difflib

    a = json.dumps(before, indent=1, ensure_ascii=False, sort_keys=True).splitlines()
    b = json.dumps(now, indent=1, ensure_ascii=False, sort_keys=True).splitlines()
    return "report differs from its snapshot:\n" + "\n".join(difflib.unified_diff(a, b, "stored", "now", lineterm="",
                                                                                  n=2))
