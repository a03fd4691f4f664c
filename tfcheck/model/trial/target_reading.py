"""Whether a loss-target argument the forward requires is the decoder input, settled by one forward.

``forward(src, targets)`` is a seq2seq tutorial's decoder input in one repository and a training forward's labels
in another; names and structure (tfcheck.model.facts.targets.required_loss_target) only make it a hypothesis.
The probe gives the targets a length of their own (the source's + TARGET_LENGTH_DELTA): the decoder input is
kept when the output follows that length and not the source's; otherwise (the output keeps the source's length,
or the forward raises) the targets are read as labels, given the input tokens, and the kind is left to the other
rules. Either way the reading is an assumption with what the forward showed. This reads the output's shape, not
the behaviour a check measures.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tfcheck.model.build.names import LOSS_TARGET_ARGS
from tfcheck.model.facts.call_plan import roles_by_parameter
from tfcheck.model.facts.causal_source import causal_source
from tfcheck.model.inputs import TARGET_LENGTH_DELTA
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest


def hypothesis(subject: ModelUnderTest) -> str | None:
    """The loss-target parameter the call plan gives the target tokens (a hypothesis to verify), or None."""
    if "kind" in subject.declared or subject.facts.inputs is not None:
        return None
    return next((name for name, role in roles_by_parameter(subject).items()
                 if role == "target_tokens" and name in LOSS_TARGET_ARGS), None)


def verify(subject: ModelUnderTest, forward: Callable[[bool], Any], raw_of: Callable[[Any], Any],
           model_error: type[Exception], describe: Callable[[Exception], str] = str) -> None:
    """Keep or drop the decoder-input reading of a required loss target (the module docstring's rule)."""
    name = hypothesis(subject)
    if name is None:
        return
    try:
        lengths = output_lengths(raw_of(forward(False)))
    except model_error as error:
        return as_labels(subject, name, f"the forward raised with {name} as a decoder input of its own length "
                                        f"({describe(error)[:160]})")
    source = subject.probe_length()
    target = max(1, source + TARGET_LENGTH_DELTA)
    if target in lengths and source not in lengths:
        subject.assumptions.append(Assumption(name, "the decoder input (target tokens)",
                                              f"the output follows its length ({target}, the source {source})"))
        return
    as_labels(subject, name, f"the output keeps the source's length ({source}), not {name}'s ({target})")


def as_labels(subject: ModelUnderTest, name: str, why: str) -> None:
    facts = subject.facts
    facts.call_plan = [(slot, "lm_targets" if role == "target_tokens" else role)
                       for slot, role in facts.call_plan or ()]
    read = causal_source(subject.model)
    facts.set("kind", None, f"unknown: {name} read as labels ({why})")
    facts.set("causal", read.causal, read.where)
    subject.assumptions[:] = [a for a in subject.assumptions if a.key not in ("kind", "causal")]
    subject.assumptions.append(Assumption(name, "the input tokens (labels of the model's own loss)", why))


def output_lengths(raw: Any) -> set[int]:
    """The sizes of axis 1 of the tensors the forward returned (the length axis of (batch, length, ...))."""
    found: set[int] = set()
    stack = [raw]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            if value.dim() >= 2:
                found.add(int(value.shape[1]))
        elif isinstance(value, (tuple, list)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
    return found
