"""train.overfit_batch: a few dozen optimiser steps on one small batch drive the loss down substantially.

Any model that can learn at all memorises one tiny batch; one that cannot has its output cut off from its
parameters (a detach, frozen weights, a loss that does not depend on them). It trains a copy.
"""
from __future__ import annotations

import torch

from tfcheck.checks.training.inference_only import inference_only_design
from tfcheck.engine.registry import check
from tfcheck.probe.schedules import sparkline
from tfcheck.probe.training import (
    CHECK_LR,
    batch_size,
    budget,
    call_copy,
    descend,
    fixed_target,
    label_argument,
    labelled_inputs,
    last_cut,
    lm_logits,
    output_loss,
    own_loss,
)
from tfcheck.probe.training_copy import CannotCopy, training_copy
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "train.overfit_batch"
#: The best loss so far must fall to this share of the first (all correct models tested reach <= 0.12 in 30
#: steps). Once it has, the verdict is a pass whatever follows, so the descent stops there.
PASS_RATIO = 0.5
#: Above this share the best loss has not really moved: the model does not learn.
FAIL_RATIO = 0.9


def _settled(losses: list[float]) -> bool:
    return losses[0] > 1e-6 and min(losses) <= PASS_RATIO * losses[0]


@check(ID, "a few dozen optimiser steps on one small batch drive the loss down", rows=("cannot-overfit-one-batch",),
       kinds=("encoder", "decoder", "seq2seq", None), order=90, group="training", applies=inference_only_design)
def train_overfit_batch(ctx) -> list[Finding]:
    """Copy the model (eval mode: dropout off) and take up to train_steps Adam steps (default 30, lr 1e-2) on
    one batch of 4 x 8: the model's own loss when it takes labels / targets, else cross-entropy against
    fixed random classes (logits) or mean squared error to a fixed random target (hidden states). The best
    loss must fall to half the first, and the steps stop as soon as it has; hardly moving (above 90%) fails.
    Cost: one forward and one backward of 32 tokens a step, on the copy."""
    subject = ctx.subject
    steps, steps_from = budget(subject)
    try:
        model = training_copy(subject)
    except CannotCopy as exc:
        return [Finding(ID, Status.SKIP, f"inconclusive: {exc}; tfcheck trains copies only, never the model",
                        evidence={})]
    batch, length = batch_size(subject)
    gen = torch.Generator().manual_seed(0)
    label = label_argument(subject)
    if label is not None:
        args, kwargs = labelled_inputs(subject, label, batch, length, gen)
        how = f"the model's own loss ({label.describe(subject)})"
    else:
        args, kwargs = subject.make_inputs(batch, length, seed=0)
        how = None
    target: dict = {}

    def loss_of(m, step):
        raw = call_copy(ctx, m, args, kwargs, f"training step {step} on one batch of {batch} x {length}")
        if label is not None:
            loss = own_loss(raw)
            if loss is None:
                raise _NoOwnLoss(label.name)
            return loss, batch * length
        out = subject.extract_output(raw)
        if "value" not in target:
            is_logits, _ = lm_logits(subject, out)
            target["value"] = fixed_target(out, is_logits, gen)
            target["how"] = ("cross-entropy against fixed random classes" if is_logits else
                             "mean squared error to a fixed random target")
        return output_loss(out, target["value"]), batch * length

    try:
        descent = descend(ctx, model, loss_of, steps, settled=_settled)
    except _NoOwnLoss as exc:
        return [Finding(ID, Status.SKIP, f"inconclusive: called with {exc.name}=..., the model returned no loss "
                        "(no .loss, ['loss'] or scalar tensor in its output); declare output=... and check the "
                        "loss wiring by hand", evidence={"label_argument": exc.name})]
    how = how or target.get("how", "a loss over the output")
    losses = descent.losses
    evidence = {"loss": how, "steps": len(losses), "steps_from": steps_from, "optimizer": f"Adam(lr={CHECK_LR})",
                "batch": f"{batch} x {length}", "trainable_parameters": descent.trainable,
                "frozen_parameters": descent.frozen, "parameters_without_gradient": descent.no_grad[:20],
                "tolerance": f"best <= {PASS_RATIO} x first (fail above {FAIL_RATIO} x first)"}
    if losses:
        evidence.update(first_loss=losses[0], best_loss=min(losses), final_loss=losses[-1],
                        curve=sparkline(losses, 30))
    if descent.settled is not None:
        evidence["stopped_early"] = (f"after {descent.settled} of {steps} steps: the best loss reached "
                                     f"{PASS_RATIO} x the first, which decides the pass")
    if descent.stopped is not None:
        return [_stopped(ctx, descent, evidence, args, kwargs)]
    if len(losses) < 2 or losses[0] <= 1e-6:
        return [Finding(ID, Status.SKIP, f"inconclusive: the loss starts at {losses[0] if losses else None}; "
                        "there is nothing to descend", evidence=evidence)]
    best = min(losses)
    ratio = best / losses[0]
    evidence["best_over_first"] = ratio
    if ratio <= PASS_RATIO:
        return [Finding(ID, Status.PASS, f"{how} fell {losses[0]:.3f} -> {best:.3f} ({ratio:.0%}) in "
                        f"{len(losses)} steps [{sparkline(losses, 30)}]", Location(module=""), evidence)]
    status = Status.FAIL if ratio > FAIL_RATIO else Status.WARN
    verdict = "hardly moves" if status is Status.FAIL else "falls slowly"
    return [Finding(ID, status, f"{how} {verdict}: {losses[0]:.3f} -> at best {best:.3f} ({ratio:.0%}) in "
                    f"{len(losses)} Adam steps at lr {CHECK_LR} on one batch [{sparkline(losses, 30)}]"
                    f"{_why(descent)}", _where(ctx, descent, args, kwargs), evidence, row="cannot-overfit-one-batch")]


class _NoOwnLoss(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _stopped(ctx, descent, evidence: dict, args: tuple, kwargs: dict) -> Finding:
    if descent.trainable == 0:
        msg = (f"every one of the {descent.frozen} parameters has requires_grad=False, so nothing can learn. "
               "If the model is frozen on purpose (a feature extractor), accept it: "
               "accept=train.overfit_batch:REASON")
    else:
        msg = f"training stopped: {descent.stopped}{_why(descent)}"
    return Finding(ID, Status.FAIL, msg, _where(ctx, descent, args, kwargs), evidence, row="cannot-overfit-one-batch")


def _where(ctx, descent, args: tuple, kwargs: dict) -> Location:
    """The line that keeps the model from learning: the one that froze its parameters, or the .detach() nearest
    the output that cuts them all off; otherwise why no single line is to blame."""
    subject = ctx.subject
    if descent.trainable == 0:
        name = next((n for n, _ in subject.model.named_parameters()), None)
        if name is None:
            return Location("", reason="the model has no parameter")
        frozen = subject.construction_site(name, module="", kind="frozen")
        return frozen if frozen.file else subject.construction_site(name, module="")
    if descent.cut_off:
        return last_cut(ctx, args, kwargs)
    if descent.stopped is not None:  # a non-finite loss: the op that makes it is numerics.nan_source's to name
        return Location("", reason=f"training stopped ({descent.stopped}); the loss has no line of its own "
                        "(numerics.nan_source names the op that makes the NaN)")
    return Location("", reason="the loss falls slowly with gradients reaching the weights: no one line is to blame "
                    "(train.grad_flow names parameters that get no gradient)")


def _why(descent) -> str:
    if descent.no_grad and len(descent.no_grad) == descent.trainable:
        return ("; no parameter gets a gradient: the output is cut off from the weights (.detach(), .data, "
                "torch.no_grad or .item() in forward)")
    if not descent.changed:
        return "; no parameter changed"
    if descent.no_grad:
        return f"; {len(descent.no_grad)} parameters get no gradient (train.grad_flow names them)"
    return ""
