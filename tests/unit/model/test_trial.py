"""The trial forward (tfcheck/model/trial/trial.py): facts only a forward shows are settled by the model layer, once
per model, inside the engine's guard; pytest's collection settles none of them, so it runs no forward."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import tfcheck
from tfcheck.battery import get
from tfcheck.engine import runner
from tfcheck.engine.runner import load_subject, run_check, settle_facts
from tfcheck.model.trial.outputs import AUTO
from tfcheck.model.trial.trial import layouts_to_try
from tfcheck.report.status import Status

LM = "reference_model:TransformerLM"
TUTORIAL = "zoo_families:TutorialEncoder"  # forward(src, src_mask) wants src_mask laid out (b, 1, 1, s)


@pytest.fixture
def forwards_of():
    """Counts the calls of models of a class name, through a global forward pre-hook."""
    counts: dict[str, int] = {}

    def count(module, args):
        name = type(module).__name__
        counts[name] = counts.get(name, 0) + 1

    handle = nn.modules.module.register_module_forward_pre_hook(count)
    yield counts
    handle.remove()


def test_collecting_the_items_runs_no_forward(pytester, forwards_of):
    result = pytester.runpytest_inprocess("--tfcheck", LM, "--collect-only", "-q")
    result.stdout.fnmatch_lines([f"tfcheck[{LM}]::forward.smoke", f"tfcheck[{LM}]::mask.causal"])
    assert forwards_of.get("TransformerLM", 0) == 0, forwards_of


def test_collecting_a_model_whose_layout_needs_a_forward_runs_none_either(pytester, forwards_of):
    result = pytester.runpytest_inprocess("--tfcheck", TUTORIAL, "--collect-only", "-q")
    result.stdout.fnmatch_lines([f"tfcheck[{TUTORIAL}]::forward.smoke"])
    assert forwards_of.get("TutorialEncoder", 0) == 0, forwards_of


def test_loading_settles_no_forward_fact():
    subject = load_subject(TUTORIAL)
    assert subject.trial is None and subject.facts.output == AUTO and subject.facts.mask.layout is None
    assert layouts_to_try(subject) == ("b1s", "b11s")


def test_the_trial_settles_the_layout_and_the_output_and_forward_smoke_pays_for_it(forwards_of):
    subject = load_subject(TUTORIAL)
    smoke = run_check(subject, get("forward.smoke"))
    assert smoke.status is Status.PASS
    assert subject.facts.mask.layout == "b11s" and subject.facts.output == "tensor"
    # (b, s) raised, (b, 1, s) raised (each recorded, then once plain to tell the model's error from a limit of
    # tfcheck's instrumentation), (b, 1, 1, s) ran recorded, then once plain for the probe the checks share:
    # six forwards, all counted in forward.smoke's cost
    assert smoke.cost.forward == 6 == forwards_of["TutorialEncoder"]
    assert [a.key for a in subject.assumptions].count("mask layout") == 1
    # Once per model: the next check runs no trial, and reuses the trial's standard probe.
    contract = run_check(subject, get("shape.contract"))
    assert contract.cost.reused >= 1 and [a.key for a in subject.assumptions].count("mask layout") == 1


class _RaisesAlways(nn.Module):
    """Requires a mask, and raises whatever its layout: the model's own error."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)

    def forward(self, x, mask):
        raise ValueError("the model's own error")


def test_a_trial_that_raises_in_every_layout_falls_back_and_forward_smoke_reports_the_models_error():
    report = tfcheck.run_checks(_RaisesAlways, only=["forward.smoke"], vocab_size=11)
    smoke = report.models[0].results[0]
    assert smoke.status is Status.FAIL and "the model's own error" in smoke.findings[0].message
    # the (batch, length) layout and the two tried after it, each recorded and once plain (it raises both ways), then
    # forward.smoke's forward at batch 1 at that length and at each other length it tries (length_reading.RETRY_LENGTHS)
    assert smoke.cost.forward == 6 + 1 + 6 and "runs_at_lengths" not in smoke.findings[0].evidence
    assert not any(a.key == "mask layout" for a in report.models[0].assumptions)


def test_trace_settles_the_layout_with_the_trial_not_with_forward_smoke(monkeypatch):
    def no_check(*args, **kwargs):
        raise AssertionError("trace ran a check to settle the layout")

    monkeypatch.setattr(runner, "run_check", no_check)
    trace = tfcheck.trace_shapes(TUTORIAL)
    assert trace.error is None, trace.error
    assert "(3, 1, 1, 7) bool" in str(trace)


def test_settle_facts_leaves_the_model_as_it_was():
    subject = load_subject(TUTORIAL)
    subject.model.train()
    before = {k: v.clone() for k, v in subject.model.state_dict().items()}
    trial = settle_facts(subject)
    assert trial is not None and trial.ran and subject.facts.mask.layout == "b11s"
    assert subject.model.training  # run in eval mode, put back
    assert all(torch.equal(v, subject.model.state_dict()[k]) for k, v in before.items())


def test_the_trials_recording_is_the_shared_recorded_probe_when_no_fact_changed():
    """The reference models declare their warmup schedule as a functools.partial: a callable fact is compared as
    itself, so the trial's recorded forward serves the checks that read recorded ops (no pass of their own)."""
    subject = load_subject(LM)
    assert run_check(subject, get("forward.smoke")).status is Status.PASS
    residual = run_check(subject, get("shape.residual"))
    assert residual.status is Status.PASS and (residual.cost.forward, residual.cost.reused) == (0, 1)


def test_a_fact_the_trial_changes_still_throws_its_recording_away(monkeypatch):
    """The other side: when a rule changes how the model is called, the recording is not of the checks' inputs."""
    from tfcheck.model.trial import trial

    def changes_a_fact(subject, observed):
        subject.facts.pad_id = 0 if subject.facts.pad_id != 0 else 1

    monkeypatch.setattr(trial, "ADOPTERS", (*trial.ADOPTERS, changes_a_fact))
    subject = load_subject(LM)
    run_check(subject, get("forward.smoke"))
    residual = run_check(subject, get("shape.residual"))
    assert residual.cost.forward == 1


# ----- an optional mask of a generic name: its reading tried in the trial (tfcheck.model.trial.optional_mask) ----

class _OptionalMaskEncoder(nn.Module):
    """forward(x, mask=None): one attention layer; ``apply`` puts the mask on the (b, 1, s, s) scores."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.qkv = nn.Linear(8, 24)

    def apply(self, scores, mask):
        return scores.masked_fill(~mask[:, None, None, :], torch.finfo(scores.dtype).min)  # a (b, s) keep mask

    def forward(self, x, mask=None):
        q, k, v = self.qkv(self.embed(x)).chunk(3, dim=-1)
        scores = (q @ k.transpose(-2, -1))[:, None] / 8 ** 0.5  # (b, 1, s, s)
        if mask is not None:
            scores = self.apply(scores, mask)
        return (scores.softmax(-1) @ v[:, None])[:, 0]


class _AdditiveSquareMask(_OptionalMaskEncoder):
    """Takes an additive float (b, 1, s, s) mask, added to the scores: a (b, s) one raises."""

    def apply(self, scores, mask):
        return scores + mask


class _RaisesOnAnyMask(_OptionalMaskEncoder):
    def apply(self, scores, mask):
        raise ValueError("the model's own error on any mask")


MASK_CHECKS = ["forward.smoke", "mask.padding", "numerics.nan_source"]


def test_an_optional_additive_square_mask_is_run_with_the_layout_and_convention_the_trial_found():
    report = tfcheck.run_checks(_AdditiveSquareMask, only=MASK_CHECKS, kind="encoder").models[0]
    mask = next(a for a in report.assumptions if a.key == "mask")
    assert mask.value == "mask:additive:b11s" and "raised" in mask.source and "adds it to the scores" in mask.source
    padding = report.result("mask.padding")
    assert padding.status is Status.PASS, padding.findings[0].message
    assert not any(r.status is Status.FAIL and "raised" in r.findings[0].message for r in report.results)


def test_an_additive_mask_tfcheck_builds_blocks_with_a_finite_constant_so_a_fully_padded_sample_is_not_nan():
    # With -inf, the fully padded sample nan_source pads would give softmax NaN from tfcheck's constant, not the
    # model's: the model fills nothing itself.
    report = tfcheck.run_checks(_AdditiveSquareMask, only=MASK_CHECKS, kind="encoder").models[0]
    nan_source = report.result("numerics.nan_source")
    assert nan_source.status is Status.PASS, nan_source.findings[0].message


class _AdditiveMaskFilledWithMinusInf(_AdditiveSquareMask):
    """Adds the caller's mask, then fills the padded keys with -inf itself: the fully padded row is the model's NaN."""

    def apply(self, scores, mask):
        return (scores + mask).masked_fill(mask < 0, float("-inf"))


def test_a_model_that_fills_minus_inf_itself_behind_an_additive_mask_still_fails_nan_source():
    report = tfcheck.run_checks(_AdditiveMaskFilledWithMinusInf, only=MASK_CHECKS, kind="encoder").models[0]
    nan_source = report.result("numerics.nan_source")
    assert nan_source.status is Status.FAIL, nan_source.findings[0].message
    assert "instead of -inf" in nan_source.findings[0].message


def test_an_optional_standard_keep_mask_keeps_the_batch_length_reading():
    subject = load_subject(_OptionalMaskEncoder)
    assert run_check(subject, get("forward.smoke")).status is Status.PASS
    assert str(subject.facts.mask) == "mask:keep" and subject.facts.mask_unread is None
    assert run_check(subject, get("mask.padding")).status is Status.PASS


def test_a_model_that_raises_under_every_reading_gets_inconclusive_mask_checks_never_a_fail():
    report = tfcheck.run_checks(_RaisesOnAnyMask, only=MASK_CHECKS, kind="encoder").models[0]
    assert report.result("forward.smoke").status is Status.PASS  # the standard probe takes no mask
    for check in MASK_CHECKS[1:]:
        result = report.result(check)
        assert result.status is Status.SKIP, (check, result.findings[0].message)
        message = result.findings[0].message
        assert "inconclusive" in message and "mask=mask:CONVENTION:LAYOUT" in message
