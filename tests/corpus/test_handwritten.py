"""The battery on the hand-written corpus (tests/corpus/handwritten_table.py), zero-config: the correct model runs
clean but for the non-passes true of its code, and its injected bug FAILs the right check at the changed line.
A gap tfcheck still has is an expected failure, strict, so that closing it forces the table to say so."""
from __future__ import annotations

import pytest
from handwritten_table import EXPLAINED, GAPS, HANDWRITTEN, evaluate

OUTCOMES: dict = {}


def outcome(name: str):
    if name not in OUTCOMES:
        OUTCOMES[name] = evaluate(name)
    return OUTCOMES[name]



@pytest.mark.parametrize("name", HANDWRITTEN)
def test_a_correct_hand_written_model_runs_zero_config_and_is_clean(name):
    result = outcome(name)
    ok = result.clean
    if (name, "correct") in GAPS:
        assert not ok, f"{name} is clean now: take ({name!r}, 'correct') off GAPS"
        pytest.xfail(GAPS[name, "correct"])
    assert result.ran, result.detail
    assert not result.unexplained, "\n".join(result.unexplained)


@pytest.mark.parametrize("name", HANDWRITTEN)
def test_an_injected_bug_fails_the_right_check_at_the_changed_line(name):
    result = outcome(name)
    ok = result.bug_fails and result.bug_line_named
    if (name, "bug") in GAPS:
        assert not ok, f"{name}'s bug is caught now: take ({name!r}, 'bug') off GAPS"
        pytest.xfail(GAPS[name, "bug"])
    assert result.bug_fails, f"{HANDWRITTEN[name].catches}: {result.bug_status} {result.detail}"
    assert result.bug_line_named, f"the finding does not name line {HANDWRITTEN[name].bug_line}"


def test_the_tables_name_only_hand_written_models_and_every_explanation_is_used():
    assert {model for model, _ in EXPLAINED} <= set(HANDWRITTEN)
    assert {model for model, _ in GAPS} <= set(HANDWRITTEN) and {side for _, side in GAPS} <= {"correct", "bug"}
    assert len(HANDWRITTEN) >= 12
    for name, entry in HANDWRITTEN.items():
        assert entry.bug_line > 0, name  # exactly one marked line
