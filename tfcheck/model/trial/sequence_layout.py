"""A (length, batch, ...) model found from the trial's structure, when nothing declares the layout and it is no
torch.nn Transformer module itself (whose batch_first says it: tfcheck.model.facts.inference).

The trial forward feeds (batch 3, length 7) ids. A sequence-first model reads axis 0 as the length: the objects it
derives from the length (a look-ahead mask built from ``x.size(0)``, a ``(max_len, 1, d)`` table cut by
``x.size(0)``: ``Observed.length_objects``) are sized by the probe's batch, and its attention runs over keys as
many as the batch (``Observed.attention_lengths``). Only when nothing reads axis 1 as the length (no length object
and no attention of a probe length) is the model taken as sequence-first. A batch-first model that feeds
batch_first=False attention, or indexes its positions by the batch, reads axis 1 as the length somewhere (its
position slice or its own attention), so it is left batch-first and its bug is measured.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tfcheck.model.build.names import KEY_PADDING_ARGS
from tfcheck.model.facts.declarations import MaskSpec
from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest
    from tfcheck.model.trial.observed import Observed


def adopt(subject: ModelUnderTest, observed: Observed) -> None:
    facts = subject.facts
    if facts.batch_first is not None or "layout" in subject.declared or facts.inputs is not None:
        return
    lengths = {subject.probe_length(), *([max(1, subject.probe_length() - 2)] if subject.takes_target else [])}
    if PROBE_BATCH in lengths:
        return
    seen, attended = observed.lengths_seen(), observed.attention_lengths
    if PROBE_BATCH not in seen or PROBE_BATCH not in attended or seen & lengths or attended & lengths:
        return
    objects = [s for s in observed.length_objects if s.length == PROBE_BATCH]
    facts.set("batch_first", False, "the trial forward's length-derived objects")
    subject.assumptions.append(Assumption(
        "layout", "(length, batch, ...)", f"the trial forward's length-derived objects took axis 0 as the length: "
        f"{'; '.join(str(s) for s in objects[:2])} sized by the probe's batch ({PROBE_BATCH}), and attention ran "
        f"over {PROBE_BATCH} keys; tfcheck transposes the token ids and features it gives and the output it reads. "
        "Declare layout=batch_first if not"))
    mask = facts.mask
    required = any(role == "mask" for _, role in facts.call_plan or ())
    if mask is not None and mask.argument is not None and mask.argument not in KEY_PADDING_ARGS \
            and "mask" not in subject.declared and not required:
        # torch's sequence-first modules take the padding as key_padding_mask (batch, length); their mask /
        # src_mask is the (length, length) attention mask, which a (batch, length) padding mask would not fit.
        facts.set("mask", MaskSpec(None, "none"), "sequence-first layout")
        subject.assumptions[:] = [a for a in subject.assumptions if a.key != "mask"]
        subject.assumptions.append(Assumption(
            "mask", "none", f"{mask.argument} of a sequence-first model is its (length, length) attention mask, as "
            f"in torch's modules (the padding goes in a key_padding_mask); declare mask={mask.argument}:keep if it "
            "takes the padding"))
