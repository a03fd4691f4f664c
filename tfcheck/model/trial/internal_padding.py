"""A padding mask built inside forward from the pad ids (``mask=internal``), settled from the trial's structure.

Evidence is the comparison itself: the trial forward compares the source tokens with an id (``src != pad``,
``seq.eq(pad)``) and the result reaches an attention (``Observed.pad_comparisons``). A ``*pad_idx`` attribute or
an embedding's ``padding_idx`` alone is none: it is often only the loss's ``ignore_index`` or the embedding's
zero row. The ids are kept per side: the source's as ``pad_id`` (which mask.padding, cross.dependence and
numerics.nan_source put in the pads), the target's as ``target_pad_id`` where it differs (never drawn as a real
target token).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tfcheck.model.facts.declarations import MaskSpec
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest
    from tfcheck.model.trial.observed import Observed


def adopt(subject: ModelUnderTest, observed: Observed) -> None:
    facts = subject.facts
    if facts.inputs is not None or facts.takes_features:
        return
    source = next((s for s in observed.pad_comparisons if s.role == "tokens"), None)
    target = next((s for s in observed.pad_comparisons if s.role == "target_tokens"), None)
    if source is not None and source.size is not None and "mask" not in subject.declared \
            and (facts.mask is None or facts.mask.argument is None) and facts.mask != MaskSpec(None, "internal"):
        facts.set("mask", MaskSpec(None, "internal"), f"the trial forward: {source}")
        subject.assumptions[:] = [a for a in subject.assumptions if a.key != "mask"]
        subject.assumptions.append(Assumption(
            "mask", "internal", f"forward builds its padding mask from the source tokens: {source}, and the mask "
            "reaches attention; declare mask=none if the pads are never masked"))
        if "pad_id" not in subject.declared and facts.pad_id != source.size:
            was = f" (was {facts.pad_id}, from {subject.source_of('pad_id')})" if facts.pad_id is not None else ""
            subject.assumptions[:] = [a for a in subject.assumptions if a.key != "pad_id"]
            facts.set("pad_id", source.size, f"the trial forward: {source}")
            subject.assumptions.append(Assumption("pad_id", source.size,
                                                  f"the id the source tokens are compared with: {source}{was}"))
    if target is not None and target.size is not None and target.size != facts.pad_id:
        facts.set("target_pad_id", target.size, f"the trial forward: {target}")
        subject.assumptions.append(Assumption(
            "target_pad_id", target.size, f"the id the target tokens are compared with: {target}; never drawn "
            "as a real target token"))
