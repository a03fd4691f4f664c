"""Reliability: whatever the model does, tfcheck does not crash, reports a status for every check, and leaves the
model and torch's process state exactly as they were; the same model gives the same report."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode

import tfcheck
from reference_model import TransformerLM, broken
from tfcheck.engine import applicable_checks, load_subject


def snapshot(model: nn.Module) -> dict:
    return {
        "state": {k: v.clone() for k, v in model.state_dict(keep_vars=False).items()},
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "modes": [m.training for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "hooks": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
                     for m in model.modules()),
        "process": (torch.get_default_dtype(), torch.is_grad_enabled(), torch.is_anomaly_enabled(),
                    len(_get_current_function_mode_stack()), _get_current_dispatch_mode()),
        "rng": (torch.get_rng_state().clone(), random.getstate(), np.random.get_state()[1].copy()),
    }


def assert_same(before: dict, after: dict) -> None:
    assert before["state"].keys() == after["state"].keys()
    assert all(torch.equal(before["state"][k], after["state"][k]) for k in before["state"])
    assert all((a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
               for a, b in zip(before["grads"], after["grads"]))
    for key in ("modes", "requires_grad", "hooks", "process"):
        assert before[key] == after[key], key
    assert torch.equal(before["rng"][0], after["rng"][0]) and before["rng"][1] == after["rng"][1]
    assert np.array_equal(before["rng"][2], after["rng"][2])


@pytest.mark.parametrize("make", [
    lambda: TransformerLM().train(),
    lambda: broken.LinearInFeaturesMismatch(),        # raises mid-forward
    lambda: broken.CausalMaskHidesDiagonal(),         # NaN everywhere
    lambda: __import__("zoo").MutatesItself(),        # writes its weights and buffers, flips its mode
], ids=["reference-lm-train-mode", "raises-mid-forward", "nan-output", "mutates-itself"])
def test_the_whole_battery_leaves_model_and_process_as_they_were(make):
    model = make()
    for p in list(model.parameters())[:2]:
        p.grad = torch.full_like(p, 0.5)
    before = snapshot(model)
    report = tfcheck.run_checks(model)
    assert_same(before, snapshot(model))
    assert report.models[0].results  # and it still reported


def test_the_same_model_gives_the_same_report():
    def run():
        data = json.loads(tfcheck.run_checks(TransformerLM(), only=None).to_json())
        for m in data["models"]:
            for c in m["checks"]:
                c.pop("seconds")
        return data

    torch.manual_seed(0)
    first = run()
    torch.manual_seed(0)
    assert run() == first


# ----- fuzzing: strange models, junk outputs, raising forwards --------------------------------------------

OUTPUTS = ["tensor", "tuple", "dict", "object", "none", "string", "scalar", "nested_junk"]


class Fuzzed(nn.Module):
    """A small causal-or-not model whose forward convention, output and failure come from the fuzzer."""

    def __init__(self, vocab: int, width: int, output: str, raise_on_call: int | None, kind: str | None):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab)
        self.output, self.raise_on_call, self.calls = output, raise_on_call, 0
        if kind is not None:
            self.__tfcheck__ = {"kind": kind}

    def forward(self, input_ids):
        self.calls += 1
        if self.raise_on_call is not None and self.calls >= self.raise_on_call:
            raise RuntimeError("fuzzed failure deep in the model")
        logits = self.head(torch.relu(self.mix(self.embed(input_ids))))
        return {
            "tensor": lambda: logits,
            "tuple": lambda: (logits, None),
            "dict": lambda: {"logits": logits, "extra": 3},
            "object": lambda: type("Out", (), {"logits": logits})(),
            "none": lambda: None,
            "string": lambda: "not a tensor",
            "scalar": lambda: logits.sum(),
            "nested_junk": lambda: [[{"a": "b"}]],
        }[self.output]()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vocab=st.integers(5, 60), width=st.sampled_from([4, 8, 12]), output=st.sampled_from(OUTPUTS),
       raise_on_call=st.one_of(st.none(), st.integers(1, 12)),
       kind=st.sampled_from([None, "encoder", "decoder"]))
def test_tfcheck_never_raises_and_reports_every_check(vocab, width, output, raise_on_call, kind):
    model = Fuzzed(vocab, width, output, raise_on_call, kind)
    try:
        report = tfcheck.run_checks(model)
    except tfcheck.UsageError as exc:  # bad input is a usage error with a message, never a crash
        assert str(exc)
        return
    results = {r.check: r for r in report.models[0].results}
    expected = {c.id for c in applicable_checks(load_subject(Fuzzed(vocab, width, output, None, kind)))}
    assert set(results) == expected
    for r in results.values():
        assert r.findings and all(f.status in tfcheck.Status and f.message for f in r.findings)
        assert all(f.status is not tfcheck.Status.ERROR for f in r.findings), r.findings
