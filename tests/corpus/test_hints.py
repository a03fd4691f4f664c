"""Every hint tfcheck can print is followed somewhere, and following one that is true of the model never makes
the report worse.

hint_catalogue.source_hints() reads every hint from tfcheck's source (``declare kind=encoder``, ``mask={}:pad``,
``--set 'kwargs=...'``). On the hand-written corpus, each hint a zero-config run prints is followed where it is
true of the model (handwritten_table.TRUTH for kind and causality, TRUE_VALUES below for the rest): its
placeholders (INT, ARG:CONVENTION, a|b choices) take the model's true values, and the run with the declaration
must turn no PASS or WARN into a FAIL or ERROR and switch off no check that ran (a SKIP after a pass). A hint no
corpus model prints is listed in ELSEWHERE with why, and the test that follows it; test_every_hint_is_followed
fails on a hint in neither table, so a new message with a hint cannot go unfollowed."""
from __future__ import annotations

import json
import math
import re

import pytest
import torch
from handwritten_table import HANDWRITTEN, TRUTH, zero_config
from hint_catalogue import ROOT, hints_in, report_text, source_hint, source_hints
from hint_elsewhere import ELSEWHERE
from torch import nn

import tfcheck
from tfcheck import Status
from tfcheck.engine.runner import over_budget
from tfcheck.model.facts.declarations import KEYS
from tfcheck.probe.training import DEFAULT_TRAIN_STEPS

#: Each corpus model's true value of the keys its hints name, beyond kind and causality: what its authors wrote
#: (its source, its docstring), never what tfcheck reported. A key missing here is a hint not followed there.
TRUE_VALUES: dict[str, dict[str, str]] = {
    "nanogpt": {"output": "0"},  # (logits, loss)
    "gpt-lecture": {"output": "0"},
    "llama-reference": {"extra": '{"start_pos": 0}'},  # a prompt's first forward
    "annotated-transformer": {"mask": "src_mask:keep:b1s", "pad_id": "2"},  # (src != pad).unsqueeze(-2), pad=2
    "bentrevett-seq2seq": {"output": "0", "pad_id": "1", "mask": "internal"},  # (output, attention); PAD_IDX = 1
    "targets-seq2seq": {"mask": "internal"},  # src != src_pad_idx, built inside
    "additive-mask-encoder": {"mask": "mask:additive:b11s"},
    "relation-mask-encoder": {"mask": "mask:keep:b1s"},  # True where i may attend to j
    "bert-classifier": {"pad_id": "0", "mask": "attention_mask:keep"},  # padding_idx=0
}
#: True of every corpus model: trained in float32, and any number of training steps is the user's to choose.
TRUE_OF_ALL = {"precision": "fp32", "train_steps": str(DEFAULT_TRAIN_STEPS)}

#: Hint id -> the corpus model on which a zero-config run prints it and the test follows it (asserted there).
COVERED_ON: dict[str, str] = {
    "kind=encoder|decoder|seq2seq|attention": "bert-classifier",  # followed as the choice true of it
    "output=INDEX": "nanogpt",  # (logits, loss): output=0
    "train_steps=INT": "nanogpt",
    "precision=fp32": "annotated-transformer",  # the alternative of "declare precision=fp16 if it trains in float16"
    "mask={}:{}:{}": "annotated-transformer",  # src_mask:keep:b1s
    "pad_id=INT": "annotated-transformer",  # the tutorial's Batch(src, tgt, pad=2)
    "extra=JSON": "llama-reference",  # extra='{"start_pos": N}'
}


def truth(name: str) -> dict[str, str]:
    kind, causal = TRUTH[name]
    return {**TRUE_OF_ALL, "kind": kind, "causal": str(causal).lower(), **TRUE_VALUES.get(name, {})}


def fill(value: str, true: str) -> str | None:
    """The printed value made concrete with the model's true one, or None where the hint is not true of it.

    Split on ":", a placeholder segment (INT, ARG) takes the true segment, a choice (keep|pad|additive) must hold
    it, a literal must equal it; a hint with fewer segments than the truth declares only those it names."""
    if not value or re.fullmatch(r"[A-Z]+|\.\.\.|JSON", value):
        return true
    printed, real = value.split(":"), true.split(":")
    if len(printed) > len(real) or not all(re.fullmatch(r"[A-Z]+", have) or want in have.split("|")
                                           for have, want in zip(printed, real, strict=False)):
        return None
    return ":".join(real[:len(printed)])


def to_follow(name: str, report) -> dict[tuple[str, str], set[str]]:
    """(key, true value) -> the printed hints it follows."""
    true, found = truth(name), {}
    for hint in set(hints_in(report_text(report))):
        value = fill(hint.value, true[hint.key]) if hint.key in true else None
        if value is not None:
            found.setdefault((hint.key, value), set()).add(hint.id)
    return found


def statuses(report) -> dict[str, Status]:
    """Each check's status; one its time budget stopped is left out (on a loaded machine any check may be, and
    that says nothing of the declaration)."""
    return {r.check: r.status for r in report.models[0].results if not over_budget(r)}


def rounds(followed: dict[tuple[str, str], set[str]]) -> list[dict[str, str]]:
    """The declarations to follow, as few runs as the keys allow: two values of one key (mask=src_mask:keep and
    mask=src_mask:keep:b1s) go in different runs."""
    values: dict[str, list[str]] = {}
    for key, value in sorted(followed):
        values.setdefault(key, []).append(value)
    return [{key: vs[i] for key, vs in values.items() if i < len(vs)} for i in range(max(map(len, values.values()),
                                                                                        default=0))]


def worsened(name: str, before, declared: dict[str, str]) -> dict[str, str]:
    """The checks a run with these declarations makes worse: a PASS or WARN that FAILs or ERRORs, a check that ran
    and is a SKIP. A check that neither ran nor read a declared key cannot be worsened by it (forward.smoke reads
    every fact, so a trial forward the declaration breaks is still seen): the run is the checks that did both."""
    entry, was = HANDWRITTEN[name], statuses(before)
    only = {r.check for r in before.models[0].results if r.status is not Status.SKIP and set(declared) & set(r.reads)}
    values = {key: json.loads(value) if value.startswith("{") else value for key, value in declared.items()}
    after = statuses(tfcheck.run_checks(entry.spec(entry.correct), only=sorted(only | {"forward.smoke"}), **values))
    return {check: f"{was[check]} -> {now}" for check, now in after.items() if check in was and (
        (now in (Status.FAIL, Status.ERROR) and was[check] not in (Status.FAIL, Status.ERROR))
        or (now is Status.SKIP and was[check] is not Status.SKIP))}


@pytest.mark.parametrize("name", HANDWRITTEN)
def test_following_a_true_hint_never_adds_a_failure_or_turns_a_check_off(name):
    before = zero_config(name)
    followed = to_follow(name, before)
    for declared in rounds(followed):
        # The hints are followed together (the corpus is slow to run); a run made worse is split, so the failure
        # names the hint. Hints that cancel (one switching a check off, another on) would hide: none do today.
        if worsened(name, before, declared):
            for key, value in declared.items():
                worse = worsened(name, before, {key: value})
                assert not worse, f"following {sorted(followed[key, value])} as {key}={value} made {worse}"
            pytest.fail(f"following {declared} together made {worsened(name, before, declared)}")
    claimed = {hint for hint, model in COVERED_ON.items() if model == name}
    matched = {hint for hint in claimed if any(source_hint(hint).matches(source_hint(p))
                                               for ps in followed.values() for p in ps)}
    assert claimed == matched, f"{sorted(claimed - matched)} not printed or not true on {name}"


def test_every_hint_is_followed():
    hints = source_hints()
    assert len(hints) >= 40, sorted(hints)  # the scan reads the messages (it would pass vacuously on none)
    unfollowed = sorted(set(hints) - set(COVERED_ON) - set(ELSEWHERE))
    assert not unfollowed, {h: hints[h] for h in unfollowed}
    stale = sorted((set(COVERED_ON) | set(ELSEWHERE)) - set(hints))
    assert not stale, f"no message in tfcheck prints {stale} any more: take it off the tables"
    assert set(COVERED_ON.values()) <= set(HANDWRITTEN)


def test_every_declaration_a_hint_names_exists():
    unknown = sorted(h for h in source_hints() if source_hint(h).key not in KEYS)
    assert not unknown, unknown


@pytest.mark.parametrize("hint", sorted(ELSEWHERE))
def test_a_hint_followed_elsewhere_names_a_test_that_exists(hint):
    path, _, test = ELSEWHERE[hint].where.partition("::")
    assert re.search(rf"def {re.escape(test)}\b", (ROOT / path).read_text()), ELSEWHERE[hint].where


class PadMaskEncoder(nn.Module):
    """forward(tokens, mask) whose mask is True at the pads (torch's key_padding_mask convention under a generic
    name): read as a keep mask, so mask.padding fails it, and the report says to declare mask=mask:pad."""

    def __init__(self, vocab_size=50, d_model=16):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, tokens, mask=None):
        q, k, v = self.qkv(self.embed(tokens)).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask[:, None, :], torch.finfo(scores.dtype).min)
        return self.out(scores.softmax(dim=-1) @ v)


def test_the_pad_convention_hint_followed_turns_the_failure_it_explains_into_a_pass():
    # No corpus model takes a pad-convention mask under a generic name, where "mask={}:pad" is true: one does here.
    before = tfcheck.run_checks(PadMaskEncoder, only=["mask.padding"], kind="encoder")
    assert "mask=mask:pad" in {h.id for h in hints_in(report_text(before))}
    assert before.models[0].result("mask.padding").status is Status.FAIL
    after = tfcheck.run_checks(PadMaskEncoder, only=["mask.padding"], kind="encoder", mask="mask:pad")
    assert after.models[0].result("mask.padding").status is Status.PASS


def test_the_hints_followed_are_real_ones():
    # An encoder is told how to declare it is one (the hint that once failed a masked-LM head's shape.contract):
    # the test above follows it on each, so it cannot pass by following nothing.
    encoders = [name for name, (kind, _) in TRUTH.items() if kind == "encoder" and name in HANDWRITTEN]
    for name in encoders:
        assert ("kind", "encoder") in to_follow(name, zero_config(name)), name
    assert len(encoders) >= 3
