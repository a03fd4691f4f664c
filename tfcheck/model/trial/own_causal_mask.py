"""Causality read from the mask-building code: a model whose kind nothing states, and whose trial forward builds a
look-ahead mask itself (a triangle on a square, ``is_causal=True``, a triangular buffer sliced:
``Observed.causal_masks``), is causal.

This reads the code that makes the mask, not the behaviour mask.causal measures: a model that builds its mask
and then forgets to apply it is still causal by intent, and its leak a failure. A model that builds none is read
as bidirectional only when its source says nothing causal either (tfcheck.model.facts.causal_source: no triangle,
no is_causal=True, no causal switch, no next-token loss, no block_size / n_ctx), said as an assumption that names
the declaration; otherwise it stays unknown (a GPT whose mask is gone behaves like an encoder, and is reported as
a warning that asks for the kind). The kind itself stays unknown: it decides the output's width, which a causal
stack without a head does not have.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tfcheck.model.facts.causal_source import causal_source
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest
    from tfcheck.model.trial.observed import Observed


def adopt(subject: ModelUnderTest, observed: Observed) -> None:
    facts = subject.facts
    if facts.kind is not None or facts.causal is not None or {"kind", "causal"} & set(subject.declared):
        return
    if not observed.causal_masks:
        read_as_bidirectional(subject)
        return
    built = observed.causal_masks[0]
    facts.set("causal", True, f"the trial forward builds a look-ahead mask: {built}")
    subject.assumptions[:] = [a for a in subject.assumptions if a.key != "causal"]
    subject.assumptions.append(Assumption(
        "causal", True, f"forward builds a look-ahead mask itself: {built} (declare causal=false or kind=encoder "
        "if not)"))


def read_as_bidirectional(subject: ModelUnderTest) -> None:
    """causal=False for a model whose source says nothing causal and whose trial forward built no mask."""
    if subject.facts.causal_mask is not None and subject.facts.causal_mask.argument is not None:
        return  # the caller passes a look-ahead mask: the model is causal by its call
    read = causal_source(subject.model)
    if not read.silent:
        return
    why = f"{read.where}, and the trial forward built no look-ahead mask"
    subject.facts.set("causal", False, why)
    subject.assumptions[:] = [a for a in subject.assumptions if a.key != "causal"]
    subject.assumptions.append(Assumption("causal", False, f"{why}: read as bidirectional (declare causal=true or "
                                                           "kind=decoder if it is causal)"))
