"""train.loss_at_init: at initialisation an LM head's cross-entropy on random tokens is near ln(vocab).

Against uniformly random targets the expected cross-entropy is ln(V) + KL(uniform || p) >= ln(V): it is
ln(V) exactly when the model predicts uniformly, as a freshly initialised one should. The expectation is
computed exactly from the logits (the mean of -log p over the vocabulary), so no target is sampled.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from tfcheck.engine.registry import NotApplicable, check
from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.probe.training import lm_logits
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "train.loss_at_init"
#: Excess over ln(V), in nats, judged "far above": logits of std s give about s^2 / 2, so 1 nat means
#: logits of std ~1.4, already past what any usual initialisation gives (GPT-2's 0.02 gives ~0).
EXCESS_TOLERANCE = 1.0


def _no_head(subject) -> NotApplicable | None:
    """Why the model has no language-model head, read from its kind and structure (before any forward)."""
    vocab = subject.facts.output_vocab_size
    if vocab is None:
        return NotApplicable("vocab_size is unknown, so there is no ln(vocab_size) to compare with (declare "
                             "vocab_size=INT)")
    if subject.kind in ("decoder", "seq2seq") and not subject.facts.takes_features:
        return None
    if any(isinstance(m, nn.Linear) and m.out_features == vocab for m in subject.model.modules()):
        return None
    return NotApplicable(f"no language-model head: kind={subject.kind or 'unknown'} and no Linear projects to "
                         f"vocab_size={vocab} (declare kind=decoder if the model outputs logits)")


@check(ID, "the initial cross-entropy of an LM head on random tokens is near ln(vocab_size)",
       rows=("loss-at-init-high",), kinds=("decoder", "seq2seq", None), order=85, applies=_no_head)
def train_loss_at_init(ctx) -> list[Finding]:
    """Reuse the standard probe (batch 3, length 7: no extra pass where another check ran it) and take
    the expected cross-entropy against uniformly random targets, mean over positions of -mean_v log p_v.
    Far above ln(vocab_size) is a warning: the logits are large at initialisation."""
    subject = ctx.subject
    probe = ctx.forward(PROBE_BATCH, subject.probe_length())
    out = probe.output
    is_logits, why = lm_logits(subject, out)
    if not is_logits:
        return [Finding(ID, Status.SKIP, f"inconclusive: the output is not a language-model head's logits ({why})",
                        evidence={"output_shape": tuple(out.shape)})]
    logp = torch.log_softmax(out.detach().double(), dim=-1)
    if not bool(torch.isfinite(logp).all()):
        return [Finding(ID, Status.SKIP, "inconclusive: the logits are not finite (shape.contract reports it)",
                        evidence={"output_shape": tuple(out.shape)})]
    vocab = out.shape[-1]
    expected = float(-logp.mean())
    floor = math.log(vocab)
    per_position = -logp.mean(-1)
    evidence = {"cross_entropy": expected, "ln_vocab": floor, "excess": expected - floor, "vocab_size": vocab,
                "worst_position_excess": float(per_position.max()) - floor,
                "logit_std": float(out.detach().float().std()),
                "head_from": why, "tolerance": f"excess <= {EXCESS_TOLERANCE} nat",
                "measured_on": f"the probe at batch {probe.batch}, length {probe.length}"}
    if expected - floor > EXCESS_TOLERANCE:
        return [Finding(ID, Status.WARN, f"the initial cross-entropy on random tokens is {expected:.2f}, "
                        f"{expected - floor:.2f} nats above ln({vocab}) = {floor:.2f} (logit std "
                        f"{evidence['logit_std']:.2f}): the logits are large at initialisation, so the first steps "
                        "spend themselves shrinking them. Usual causes: a head tied to an embedding initialised "
                        "N(0, 1), a missing final norm, an extra scale before the head", _head_init(subject, vocab),
                        evidence, row="loss-at-init-high")]
    return [Finding(ID, Status.PASS, f"initial cross-entropy {expected:.3f} vs ln({vocab}) = {floor:.3f} "
                    f"(excess {expected - floor:.3f} nat)", Location(module=""), evidence)]


def _head_init(subject, vocab: int) -> Location:
    """The line that last initialised the head's weight (a Linear to vocab_size; a table tied to it is the same
    parameter), or its construction line when nothing re-initialised it."""
    model = subject.model
    head = next(((n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and m.out_features == vocab),
                None)
    if head is None:
        return Location("", reason=f"no nn.Linear projects to vocab_size={vocab}, so the head's init line is unknown")
    name = next((n for n, p in model.named_parameters() if p is head[1].weight), None)
    if name is None:
        return Location(head[0], reason="the head's weight is not a parameter of the model")
    written = subject.construction_site(name, module=head[0], kind="written")
    return written if written.file else subject.construction_site(name, module=head[0])
