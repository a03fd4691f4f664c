"""Noise is not a mask bug: a model that runs dropout in eval mode fails dropout.eval, and the checks that compare
forwards (the flow checks) run with that dropout neutralised, so they still measure the masks: a mask bug next to
the dropout is reported in the same run, a correct mask passes. Noise tfcheck cannot neutralise makes them
inconclusive, never failed; a model whose eval mode is deterministic runs exactly as before."""
from __future__ import annotations

import inspect
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tfcheck
import zoo_noise
from model_state import assert_same, snapshot
from reference_model import TransformerLM, broken
from tfcheck import Status
from tfcheck.battery import all_checks
from tfcheck.engine.context import CheckContext
from tfcheck.engine.noise_text import NEUTRALISED
from tfcheck.engine.runner import Runner, applicable_checks, load_subject
from tfcheck.probe.deterministic import EVIDENCE_KEY, Neutraliser, generator_states, moved

FLOW = [c.id for c in all_checks() if c.flow]
#: The checks the noise used to fail on broken.DropoutInEval, and dropout.eval, which reports the noise.
MEASURED = ["batch.independence", "mask.causal", "mask.padding", "attention.heads", "dropout.eval"]


def report_of(model):
    return tfcheck.run_checks(model, only=MEASURED).models[0]


def neutralised(model_report) -> list:
    return [a for a in model_report.assumptions if a.key == NEUTRALISED]


@pytest.mark.parametrize("make", [broken.DropoutInEval, zoo_noise.SDPADropoutInEval, zoo_noise.BernoulliMaskInEval],
                         ids=["F.dropout", "sdpa-dropout_p", "torch.bernoulli"])
def test_dropout_in_eval_fails_dropout_eval_only(make):
    model = make()
    before = snapshot(model)  # the RNG and the process too: the measurement reseeds and pushes a mode
    report = report_of(model)
    assert_same(before, snapshot(model))
    dropout = report.result("dropout.eval").findings[0]
    assert dropout.status is Status.FAIL and dropout.row == "dropout-in-eval", dropout.message
    for check in ("mask.causal", "mask.padding", "batch.independence", "attention.heads"):
        assert report.result(check).status is Status.PASS, report.result(check).findings[0].message
    [assumption] = neutralised(report)
    assert os.path.basename(inspect.getsourcefile(make)) in assumption.value, assumption  # names the user's line


def test_a_causal_mask_bug_next_to_dropout_in_eval_is_reported_in_the_same_run():
    report = report_of(zoo_noise.DropoutInEvalAndCausalMaskOffByOne())
    assert report.result("dropout.eval").findings[0].row == "dropout-in-eval"
    causal = report.result("mask.causal").findings[0]
    alone = tfcheck.run_checks(broken.CausalMaskOffByOne, only=["mask.causal"]).models[0].result("mask.causal")
    assert causal.status is Status.FAIL and causal.row == alone.findings[0].row == "causal-mask-misaligned", \
        causal.message
    pattern = alone.findings[0].message.split(":")[0]  # "causal leak (diagonal off by one)"
    assert causal.message.startswith(pattern), causal.message
    assert EVIDENCE_KEY not in causal.evidence
    assert report.result("mask.padding").status is Status.PASS


@pytest.mark.parametrize("make", [zoo_noise.NoiseInEval, zoo_noise.DropoutAndNoiseInEval],
                         ids=["randn_like", "dropout-and-randn_like"])
def test_noise_that_cannot_be_neutralised_makes_the_flow_checks_inconclusive(make):
    model = make()
    before = snapshot(model)
    report = tfcheck.run_checks(model).models[0]
    assert_same(before, snapshot(model))
    assert report.result("dropout.eval").status is Status.FAIL
    flow = [r for r in report.results if r.check in FLOW]
    assert {r.check for r in flow} >= {"batch.independence", "mask.causal", "mask.padding"}
    for result in flow:
        [finding] = result.findings
        assert finding.status is Status.SKIP and finding.message.startswith("inconclusive:"), finding.message
        measured = finding.evidence[EVIDENCE_KEY]
        assert "torch.randn_like" in measured["not_neutralised"] and measured["measured"].startswith("two forwards")
    assert not neutralised(report)


def test_a_model_whose_eval_mode_is_deterministic_runs_as_before(monkeypatch):
    """reference TransformerLM has nn.Dropout modules (p=0.1), which eval mode turns off."""
    subject = load_subject(TransformerLM, {})
    runner = Runner(subject)
    results = {c.id: runner.result(c) for c in applicable_checks(subject) if c.group == "probe"}
    measured = CheckContext(subject).determinism()  # memoised by the first flow check: no forward now
    assert measured is not None and measured.change <= measured.tolerance
    assert not measured.neutralised and not measured.neutralises and not measured.uncontrolled
    assert not neutralised(subject)

    plain = load_subject(TransformerLM, {})
    monkeypatch.setattr(CheckContext, "run_flow_check", lambda ctx, chk: list(chk.func(ctx)))
    plain_runner = Runner(plain)
    for check in FLOW:
        if check in results:
            assert [(f.status, f.message) for f in results[check].findings] == \
                [(f.status, f.message) for f in plain_runner.result(next(c for c in all_checks() if c.id == check))
                 .findings], check


@pytest.mark.parametrize("make, forwards", [(TransformerLM, 0), (broken.DropoutInEval, 1)],
                         ids=["deterministic", "dropout-in-eval"])
def test_determinism_is_measured_once_per_model_for_at_most_one_forward(make, forwards, monkeypatch):
    """Run one check at a time, as the pytest plugin does. A model whose trial forwards drew no random number
    pays nothing; one that did pays one forward, in the first flow check; the others reuse the measurement."""
    calls = []
    real = CheckContext._measure_determinism

    def counted(ctx):
        start = ctx.cost.forward
        measured = real(ctx)
        calls.append(ctx.cost.forward - start)
        return measured

    monkeypatch.setattr(CheckContext, "_measure_determinism", counted)
    subject = load_subject(make, {})
    runner = Runner(subject)
    for chk in applicable_checks(subject):
        if chk.flow:
            runner.result(chk)
    assert calls == [1] * forwards
    measured = CheckContext(subject).determinism()
    assert measured is not None and measured.neutralises == bool(forwards)


def test_the_flow_checks_are_a_property_of_the_registry():
    flow = set(FLOW)
    assert {"mask.causal", "mask.padding", "batch.independence", "attention.heads"} <= flow
    assert "dropout.eval" not in flow and not any(c.startswith("train.") for c in flow)


def test_the_neutraliser_runs_random_ops_as_eval_mode_would_and_notes_the_rest():
    x = torch.randn(2, 5, 8)
    attention = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    in_eval = attention.eval()(x, x, x)[0]
    start = generator_states()
    with Neutraliser() as neutraliser:
        assert torch.equal(F.dropout(x, 0.3), x) and torch.equal(F.dropout1d(x, 0.3, True), x)
        assert torch.equal(torch.dropout(x, 0.3, True), x)
        assert torch.allclose(F.scaled_dot_product_attention(x, x, x, dropout_p=0.4),
                              F.scaled_dot_product_attention(x, x, x))
        assert torch.equal(torch.bernoulli(torch.full_like(x, 0.9)), torch.full_like(x, 0.9))
        assert torch.equal(torch.empty_like(x).bernoulli_(0.8), torch.full_like(x, 0.8))
        out = F.multi_head_attention_forward(
            x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), 8, 2, attention.in_proj_weight,
            attention.in_proj_bias, None, None, False, 0.5, attention.out_proj.weight, attention.out_proj.bias,
            training=True)[0]
        assert torch.allclose(out.transpose(0, 1), in_eval, atol=1e-6)
        assert torch.equal(F.dropout(x, 0.3, training=False), x)  # already deterministic: not counted
    assert moved(start, generator_states()) == []
    assert set(neutraliser.neutralised) == {"F.dropout", "F.dropout1d", "torch.dropout",
                                            "F.scaled_dot_product_attention", "torch.bernoulli",
                                            "torch.Tensor.bernoulli_", "F.multi_head_attention_forward"}
    assert neutraliser.neutralised["F.dropout"].calls == 1 and not neutraliser.left
    with Neutraliser() as neutraliser:
        torch.randn_like(x)
    assert list(neutraliser.left) == ["torch.randn_like"] and moved(start, generator_states()) == ["torch"]


def test_replaying_a_mask_bug_next_to_dropout_measures_the_mask_not_the_noise():
    from tfcheck.shrinking import replay

    model = zoo_noise.DropoutInEvalAndCausalMaskOffByOne()
    finding = tfcheck.run_checks(model, only=["mask.causal"]).models[0].result("mask.causal").findings[0]
    example = {k: finding.evidence["minimal_example"][k] for k in ("batch", "length", "position", "seed")}
    shown = [str(replay(model, "mask.causal", example)) for _ in range(2)]
    # the change the check measured, twice: the dropout left on in eval does not reach the numbers
    assert shown[0] == shown[1] and finding.evidence["minimal_example"]["shows"] in shown[0]
