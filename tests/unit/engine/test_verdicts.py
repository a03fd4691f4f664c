"""Verdicts are values: a check says "not applicable" or "inconclusive" with NotApplicable / Inconclusive and
the verdict helpers of tfcheck.engine.registry, and no code reads a status back out of a message."""
from __future__ import annotations

import re
from pathlib import Path

import tfcheck
from tfcheck.battery import get
from tfcheck.engine.registry import (
    Check,
    Inconclusive,
    NotApplicable,
    failed,
    inconclusive,
    not_applicable,
    passed,
    warned,
)
from tfcheck.engine.runner import load_subject
from tfcheck.report.status import Status

PACKAGE = Path(tfcheck.__file__).resolve().parent
#: Reading a status word back out of a message: slicing its prefix off, or testing for it.
PARSES_A_PREFIX = re.compile(r"""(startswith|len|removeprefix)\(\s*["'](not applicable|inconclusive)""")


def test_no_code_parses_a_status_prefix_out_of_a_message():
    found = [f"{p.relative_to(PACKAGE)}:{n}: {line.strip()}" for p in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(p.read_text("utf-8").splitlines(), 1) if PARSES_A_PREFIX.search(line)]
    assert not found, "return NotApplicable / Inconclusive instead:\n" + "\n".join(found)


def test_the_values_render_as_the_messages_always_did():
    assert str(NotApplicable("no cache")) == "not applicable: no cache"
    assert str(Inconclusive("nothing moved")) == "inconclusive: nothing moved"
    skipped = inconclusive("x.y", "nothing moved", evidence={"change": 0.0})
    assert (skipped.status, skipped.message, skipped.evidence) == (Status.SKIP, "inconclusive: nothing moved",
                                                                   {"change": 0.0})
    assert not_applicable("x.y", "no cache").message == "not applicable: no cache"
    assert [f.status for f in (passed("x.y", "ok"), failed("x.y", "bad", row="r"), warned("x.y", "odd"))] == \
        [Status.PASS, Status.FAIL, Status.WARN]
    assert failed("x.y", "bad", row="r").row == "r"


def test_applies_gives_the_reason_as_a_value_and_the_report_the_reason_alone():
    subject = load_subject("reference_model:TransformerLM", {})
    why = get("decode.cache").not_applicable(subject)
    assert isinstance(why, NotApplicable) and why.reason.startswith("forward takes no cache argument")
    assert get("forward.smoke").not_applicable(subject) is None
    report = tfcheck.run_checks("reference_model:TransformerLM", causal=False, only=["mask.causal"])
    reasons = [a.source for a in report.models[0].assumptions if a.key == "not applicable" and a.value == "mask.causal"]
    assert reasons and reasons[0].startswith("causal=false")


def test_a_check_whose_applies_returns_a_plain_string_still_gets_a_value():
    subject = load_subject("reference_model:TransformerLM", {})
    legacy = Check("x.legacy", "t", frozenset({"decoder"}), (), lambda ctx: [], "", applies=lambda s: "old style")
    assert legacy.not_applicable(subject) == NotApplicable("old style")
    assert Check("x.kind", "t", frozenset({"encoder"}), (), lambda ctx: [], "").not_applicable(subject) == \
        NotApplicable("not for kind decoder")
