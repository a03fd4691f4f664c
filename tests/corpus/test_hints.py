"""Every hint tfcheck prints is a declaration that exists, and following one that is true of the model never
makes the report worse: on the hand-written corpus, each hint a zero-config run prints (``declare kind=encoder``,
``causal=true``, ...) that matches what the model is (handwritten_table.TRUTH) is followed, and the run with it
must add no FAIL or ERROR and switch no check off (a check that ran still runs). Hints with a placeholder
(``VALUE``, ``INT``, ``ARG``) are followed with real values where they are printed: tests/unit/model/test_calling.py
(the forward tfcheck cannot call) and tests/integration/test_engine.py (the extra declaration)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from handwritten_table import HANDWRITTEN, TRUTH

import tfcheck
from tfcheck import Status
from tfcheck.model.facts.declarations import KEYS

ROOT = Path(__file__).resolve().parents[2]
#: A hint as tfcheck writes it: "declare KEY=VALUE" (also "Declare", "--set KEY=VALUE", "declare KEY=... if not").
HINT = re.compile(r"(?:[Dd]eclare|--set '?|--tfcheck-set '?) *([a-z_]+)=([A-Za-z0-9_:.\-]+)")


def hints_in_source() -> set[tuple[str, str]]:
    """Every (key, value) hint written in tfcheck's string literals and f-strings."""
    found = set()
    for path in (ROOT / "tfcheck").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= set(HINT.findall(node.value))
    return found


def test_every_declaration_a_hint_names_exists():
    hints = hints_in_source()
    assert len({key for key, _ in hints}) >= 10  # the scan reads the messages (it would pass vacuously on none)
    unknown = {f"{key}={value}" for key, value in hints if key not in KEYS}
    assert not unknown, unknown


def printed_hints(report) -> set[tuple[str, str]]:
    text = str(report) + json.dumps(report.to_dict(), default=str)
    return {(key, value.rstrip(".,;)")) for key, value in HINT.findall(text)}


def true_of(name: str, key: str, value: str) -> bool:
    kind, causal = TRUTH[name]
    return (key == "kind" and value == kind) or (key == "causal" and value == str(causal).lower())


def outcome(report) -> tuple[set[str], set[str]]:
    model = report.models[0]
    return ({r.check for r in model.results if r.status in (Status.FAIL, Status.ERROR)},
            {r.check for r in model.results})


@pytest.mark.parametrize("name", HANDWRITTEN)
def test_following_a_true_hint_never_adds_a_failure_or_turns_a_check_off(name):
    entry = HANDWRITTEN[name]
    before = tfcheck.run_checks(entry.spec(entry.correct))
    failed, ran = outcome(before)
    followed = sorted((k, v) for k, v in printed_hints(before) if true_of(name, k, v))
    for key, value in followed:
        after = tfcheck.run_checks(entry.spec(entry.correct), **{key: value})
        failed_after, ran_after = outcome(after)
        assert failed_after <= failed, f"{key}={value} added {failed_after - failed}:\n{after}"
        assert ran <= ran_after, f"{key}={value} switched off {ran - ran_after}:\n{after}"


def test_the_hints_followed_are_real_ones():
    # An encoder is told how to declare it is one (the hint that once failed a masked-LM head's shape.contract):
    # the test above follows it on each, so it cannot pass by following nothing.
    encoders = [name for name, (kind, _) in TRUTH.items() if kind == "encoder"]
    for name in encoders:
        entry = HANDWRITTEN[name]
        printed = printed_hints(tfcheck.run_checks(entry.spec(entry.correct)))
        assert ("kind", "encoder") in printed, (name, printed)
    assert len(encoders) >= 3
