"""A pooled output for shape.contract: one vector per sample, (batch, C), where the model pools the sequence by design
(a sequence classifier's logits from its [CLS] position, a sentence encoder's mean over the tokens).

The design is read from the model's structure, never from the failing shape alone: the shared recorded forward
(tfcheck.probe.pooled_output) must show an op of the model's own that pools the positions on the way to the output,
and none that folds them into another axis. Then every probe must return (batch, C), C as at the standard probe. A
language model's (batch, vocab_size) logits of one position stay a failure: its loss reads every position's logits,
so a forward returning one of them cannot be trained.
"""
from __future__ import annotations

from tfcheck.engine.context import ModelRaised
from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.model.trial.outputs import known
from tfcheck.probe.pooled_output import LengthAxis, length_axis
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status


def lost_length(verdict: Finding) -> bool:
    """A shape failure whose output has one row per sample and no other axis: the length axis is gone."""
    shape = tuple(verdict.evidence.get("output_shape") or ())
    return verdict.status is Status.FAIL and verdict.evidence.get("problem") == "shape" and len(shape) == 2 \
        and shape[0] == verdict.evidence["batch"]


def pooled_design(ctx) -> LengthAxis | str:
    """The pooling shape.contract judges the output by; else what the recorded forward says against it, as a clause
    to add to the failure ('' where it says nothing)."""
    try:
        axis = length_axis(ctx)
    except ModelRaised:  # the recorded forward raised where the plain one did not: no structure to read
        return ""
    if axis is None or axis.pooled_by == () == axis.folded_by:
        return ""
    if axis.folded_by:
        return (f"; the recorded forward folds the positions into another axis at {axis.folded_by[0].describe()}, "
                "which no pooling does")
    subject = ctx.subject
    language_model = subject.kind in ("decoder", "seq2seq") or subject.facts.causal is True
    if language_model and axis.width in known(subject.facts.output_vocab_size, subject.facts.vocab_size):
        return (f"; the model keeps one position's vocabulary logits ({axis.main.describe()}), but a language "
                "model returns the logits of every position, which its loss reads: return them all, and take the "
                "last one where it generates")
    return axis


def why_width(axis: LengthAxis) -> str:
    return f"C = {axis.width}, the pooled output's width at the standard probe (batch {PROBE_BATCH})"


def passed(check_id: str, verdicts: list[Finding], axis: LengthAxis, sizes: list[str]) -> Finding:
    """The pass of a pooled output: every size (batch, C), with the op that pools and its line as the note."""
    dtype = verdicts[-1].evidence["dtype"].replace("torch.", "")
    return Finding(check_id, Status.PASS,
                   f"output is pooled, (batch, {axis.width}), {dtype} and finite at batch x length {', '.join(sizes)}: "
                   f"one vector per sample by design, so no length axis; the model pools the sequence at "
                   f"{axis.main.describe()}", Location(module=""),
                   {"sizes": sizes, "last_dim_from": why_width(axis), "pooled": axis.evidence(),
                    "checked": [{k: x for k, x in v.evidence.items() if k != "problem"} for v in verdicts]})
