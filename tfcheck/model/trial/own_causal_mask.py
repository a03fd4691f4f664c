"""Causality read from the mask-building code: a model whose kind nothing states, and whose trial forward builds a
look-ahead mask itself (a triangle on a square, ``is_causal=True``, a triangular buffer sliced:
``Observed.causal_masks``), is causal.

This reads the code that makes the mask, not the behaviour mask.causal measures: a model that builds its mask
and then forgets to apply it is still causal by intent, and its leak a failure; a model that builds none is
left unknown (a GPT without any mask behaves like an encoder, and is reported as a warning that asks for the
kind). The kind itself stays unknown: it decides the output's width, which a causal stack without a head does
not have.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest
    from tfcheck.model.trial.observed import Observed


def adopt(subject: ModelUnderTest, observed: Observed) -> None:
    facts = subject.facts
    if facts.kind is not None or facts.causal is not None or {"kind", "causal"} & set(subject.declared):
        return
    if not observed.causal_masks:
        return
    built = observed.causal_masks[0]
    facts.set("causal", True, f"the trial forward builds a look-ahead mask: {built}")
    subject.assumptions[:] = [a for a in subject.assumptions if a.key != "causal"]
    subject.assumptions.append(Assumption(
        "causal", True, f"forward builds a look-ahead mask itself: {built} (declare causal=false or kind=encoder "
        "if not)"))
