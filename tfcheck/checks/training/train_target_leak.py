"""train.target_leak: a model that computes its own loss from labels / targets must not be able to push
that loss below ln(vocab) on random tokens. Random tokens have nothing to learn, so a loss far below
ln(vocab) on a fresh batch means the answer is in the input: the targets are not shifted and the model
copies its input.

Who shifts is declared (``label_shift``) or read from the label argument's documentation in the forward docstring
(BART's ``*ForCausalLM``: "The labels are not shifted inside the model"), else from the argument's name: Hugging
Face ``labels`` equal the input ids and are shifted inside the model; nanoGPT / minGPT ``targets`` are the next
tokens, shifted by the caller (tfcheck.model.facts.label_convention). A stated convention is never taken on trust: a
second copy, trained as long on labels that give the answer away in that convention, must learn to copy (the
positive control), or the pass is inconclusive.

First, and mostly alone, an exact readout (``target_readout``): the gradient of the model's own loss with respect to
its logits names the token each position is trained on, in one forward and one backward. Trained on the token it is
fed is a leak; on the next token, correct, in whatever convention the model follows. Only a loss the readout cannot
read (logits outside its graph, a loss that is not a cross-entropy of them) takes the stepping version.
"""
from __future__ import annotations

import math

import torch

from tfcheck.checks.training.inference_only import inference_only_design
from tfcheck.checks.training.target_readout import Readout, read_targets
from tfcheck.engine.registry import NotApplicable, check
from tfcheck.probe.training import (
    CHECK_LR,
    batch_size,
    budget,
    call_copy,
    descend,
    label_argument,
    labelled_inputs,
    leaking_inputs,
    own_loss,
    takes_target,
)
from tfcheck.probe.training_copy import CannotCopy, training_copy
from tfcheck.recording.recorder import Recorder
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "train.target_leak"
#: The ops a model's own loss is computed by (F.cross_entropy records as one op, nll_loss under log_softmax).
LOSS_OPS = frozenset({"cross_entropy", "nll_loss"})
#: A fresh-batch loss below this share of ln(V) is a leak: a model that cannot see the answer stays at
#: ln(V) or above (correct models measured 4.58 .. 4.87 for ln(101) = 4.62); one that copies its input
#: falls towards 0 (the reference variant reaches ~2 in 30 steps).
LEAK_SHARE = 0.75
#: Between LEAK_SHARE and this share, something in the input partly gives the answer away.
SUSPECT_SHARE = 0.9


def _not_applicable(subject) -> NotApplicable | None:
    if (why := inference_only_design(subject)) is not None:
        return why
    if label_argument(subject) is None:
        return NotApplicable("the model does not compute its own loss (no labels / targets argument in forward); "
                             "the loss you compute from its output is yours to shift")
    if subject.facts.causal is not True:
        return NotApplicable(f"not causal (causal={subject.facts.causal}, kind={subject.kind or 'unknown'}): a "
                             "masked LM's labels are its own inputs by design. Declare causal=true (or kind=decoder) "
                             "if it predicts the next token")
    return None


@check(ID, "a model's own loss on random tokens stays near ln(vocab_size) after a few steps",
       rows=("targets-not-shifted",), order=91, group="training", applies=_not_applicable)
def train_target_leak(ctx) -> list[Finding]:
    """For a causal model whose forward takes labels / targets: read which token each position of its own loss
    is trained on (one forward and one backward of a random batch of 4 x 8 in the argument's convention). Where
    that cannot be read: copy it and take train_steps Adam steps (default 30, lr 1e-2), each on a fresh random
    batch, then compute the model's own loss on another fresh batch without a graph. It must stay near
    ln(vocab_size). Under a declared or documented convention, a pass also needs its positive control
    (_judged_with_control)."""
    subject = ctx.subject
    label = label_argument(subject)
    assert label is not None  # the check applies only to a model with one (_not_applicable)
    readout = read_targets(ctx, label)
    if readout.trained_on is not None:
        return [_read(ctx, label, readout)]
    vocab = subject.facts.output_vocab_size
    if not vocab:
        return [Finding(ID, Status.SKIP, "inconclusive: vocab_size is unknown; declare vocab_size=INT",
                        evidence={"readout": readout.why})]
    try:
        model = training_copy(subject)
    except CannotCopy as exc:
        return [Finding(ID, Status.SKIP, f"inconclusive: {exc}; tfcheck trains copies only", evidence={})]
    steps, steps_from = budget(subject)
    batch, length = batch_size(subject)
    gen = torch.Generator().manual_seed(1)

    def loss_of(m, step):
        args, kwargs = labelled_inputs(subject, label, batch, length, gen)
        loss = own_loss(call_copy(ctx, m, args, kwargs, f"training step {step} on random tokens"))
        if loss is None:
            raise LookupError(label.name)
        return loss, batch * length

    try:
        descent = descend(ctx, model, loss_of, steps)
        args, kwargs = labelled_inputs(subject, label, batch, length, gen)
        fresh = own_loss(call_copy(ctx, model, args, kwargs, "the loss on a fresh random batch", grad=False))
    except LookupError:
        return [Finding(ID, Status.SKIP, f"inconclusive: called with {label.name}=..., the model returned no loss "
                        "(no .loss, ['loss'] or scalar tensor)", evidence={"label_argument": label.name})]
    floor = math.log(vocab)
    evidence = {"label_argument": label.describe(subject), "steps": len(descent.losses), "steps_from": steps_from,
                "optimizer": f"Adam(lr={CHECK_LR})", "batch": f"{batch} x {length}, fresh random tokens each step",
                "training_losses": [round(x, 4) for x in descent.losses], "ln_vocab": floor,
                "tolerance": f"fresh-batch loss >= {LEAK_SHARE} x ln(vocab) (warn below {SUSPECT_SHARE} x)",
                "readout": {"undecided": readout.why, **readout.evidence}}
    if fresh is None or not math.isfinite(float(fresh)) or not descent.changed:
        why = "training did not change the model (train.overfit_batch tells why)" if not descent.changed else \
            f"the fresh-batch loss is {fresh}"
        return [Finding(ID, Status.SKIP, f"inconclusive: {why}", evidence=evidence)]
    value = float(fresh)
    evidence["fresh_batch_loss"] = value
    if value < SUSPECT_SHARE * floor:
        status = Status.FAIL if value < LEAK_SHARE * floor else Status.WARN
        return [Finding(ID, status, f"after {len(descent.losses)} steps on random tokens the model's own loss on a "
                        f"fresh random batch is {value:.3f}, far below ln({vocab}) = {floor:.3f}: nothing in random "
                        f"tokens predicts the next one, so the model reads the answer from its input. With "
                        f"{label.describe(subject)}, {_shift_needed(label)}", _loss_line(ctx, label), evidence,
                        row="targets-not-shifted")]
    passed = (f"the model's own loss on a fresh random batch is {value:.3f} after {len(descent.losses)} steps, near "
              f"ln({vocab}) = {floor:.3f}: the targets are not in the input ({label.describe(subject)})")
    if label.stated_by is None or takes_target(subject):
        return [Finding(ID, Status.PASS, passed, Location(module=""), evidence)]
    return [_judged_with_control(ctx, label, steps, passed, evidence)]


def _read(ctx, label, readout: Readout) -> Finding:
    """The verdict of the readout: trained on the token fed is a leak; on the next token, correct."""
    subject = ctx.subject
    batch, length = batch_size(subject)
    evidence = {"label_argument": label.describe(subject), "how": "the gradient of the model's own loss with "
                "respect to its logits: its most negative entry at each position is the class trained on there",
                "batch": f"{batch} x {length} random tokens", **readout.evidence}
    if readout.trained_on == "fed":
        return Finding(ID, Status.FAIL, (
            f"the model's own loss trains each position on the token it is fed ({readout.why}, read off the gradient "
            f"of the loss with respect to the logits), which the position sees: the model learns to copy its input "
            f"and the loss falls while it learns nothing. With {label.describe(subject)}, {_shift_needed(label)}"),
            _loss_line(ctx, label), evidence, row="targets-not-shifted")
    duty = f" {CALLER_DUTY[label.shifted_by]}" if label.stated_by is not None and not takes_target(subject) else ""
    return Finding(ID, Status.PASS, (
        f"the model's own loss trains each position on the next token ({readout.why}, read off the gradient of the "
        f"loss with respect to the logits): the targets are not in the input ({label.describe(subject)}).{duty}"),
        Location(module=""), evidence)


def _shift_needed(label) -> str:
    """What the loss must compare, in the label argument's convention."""
    if label.shifted_by == "caller":
        return ("the loss must compare position t's logits with labels[t] (already token t + 1); a loss that "
                "compares them with a later label reads the answer")
    return "the loss must compare position t's logits with token t + 1 (logits[:, :-1] against labels[:, 1:])"


#: What the positive control's labels are, in each convention: the mistake of a caller that gives the answer away.
CONTROL_LABELS = {"caller": "labels = the input tokens (a training that forgot to shift them)",
                  "inside": "labels = the input tokens moved one position right (shifted the wrong way)"}
#: What a caller of the model must pass, in each stated convention.
CALLER_DUTY = {"caller": "Your training must shift the labels, as the model does not: labels[t] = token t + 1 "
                         "(labels = input_ids[:, 1:], the last position ignored)",
               "inside": "Your training must pass labels = input_ids unshifted, as the model shifts them"}


def _judged_with_control(ctx, label, steps: int, passed: str, evidence: dict) -> Finding:
    """A pass under a stated convention stands only when a leak in that convention shows: another copy, trained
    as long on labels that give the answer away, must fall below the failing share of ln(vocab)."""
    floor = evidence["ln_vocab"]
    try:
        control = _control_loss(ctx, label, steps)
    except (CannotCopy, LookupError) as exc:
        control, why = None, f"the control could not run ({exc})"
    else:
        why = f"the control's fresh-batch loss is {control}"
    if control is None or not math.isfinite(control):
        return Finding(ID, Status.SKIP, f"inconclusive: {passed}, but {why}", evidence=evidence)
    evidence["positive_control"] = {"labels": CONTROL_LABELS[label.shifted_by], "fresh_batch_loss": control,
                                    "tolerance": f"below {LEAK_SHARE} x ln(vocab) = {LEAK_SHARE * floor:.3f}"}
    if control >= LEAK_SHARE * floor:
        other = "inside" if label.shifted_by == "caller" else "caller"
        return Finding(ID, Status.SKIP, (
            f"inconclusive: {passed}; but its positive control, a copy trained as long with "
            f"{CONTROL_LABELS[label.shifted_by]}, stayed at {control:.3f} (not below {LEAK_SHARE} x ln(vocab)), so a "
            f"leak would not have shown in {steps} steps. Declare a larger train_steps (e.g. train_steps=100) for a "
            f"model that learns slowly, or label_shift={other} if the model does not follow "
            f"label_shift={label.shifted_by} ({label.stated_by})"), evidence=evidence)
    return Finding(ID, Status.PASS, (
        f"{passed}; its positive control, a copy trained as long with {CONTROL_LABELS[label.shifted_by]}, fell to "
        f"{control:.3f}, so a leak shows. {CALLER_DUTY[label.shifted_by]}"), Location(module=""), evidence)


def _control_loss(ctx, label, steps: int) -> float | None:
    """The fresh-batch loss of a copy trained ``steps`` steps on labels that give the answer away."""
    subject = ctx.subject
    model = training_copy(subject)
    batch, length = batch_size(subject)
    gen = torch.Generator().manual_seed(3)

    def loss_of(m, step):
        args, kwargs = leaking_inputs(subject, label, batch, length, gen)
        loss = own_loss(call_copy(ctx, m, args, kwargs, f"positive control step {step}: labels that give the "
                                  "answer away"))
        if loss is None:
            raise LookupError(f"called with {label.name}=..., the model returned no loss")
        return loss, batch * length

    descend(ctx, model, loss_of, steps)
    args, kwargs = leaking_inputs(subject, label, batch, length, gen)
    fresh = own_loss(call_copy(ctx, model, args, kwargs, "the positive control's loss on a fresh batch", grad=False))
    return None if fresh is None else float(fresh)


def _loss_line(ctx, label) -> Location:
    """The line that computes the model's own loss: the last loss op of one recorded forward with labels."""
    subject = ctx.subject
    batch, length = batch_size(subject)
    args, kwargs = labelled_inputs(subject, label, batch, length, torch.Generator().manual_seed(2))
    recorder = Recorder(subject.model)
    try:
        with recorder:
            call_copy(ctx, subject.model, args, kwargs, "a recorded forward with labels, to find the loss's line",
                      grad=False)
    except Exception as exc:  # noqa: BLE001 - the finding stands without its line
        return Location("", reason=f"the recorded forward that looks for the loss raised {type(exc).__name__}")
    ops = [op for op in recorder.recording.ops if op.level == "function" and op.short_name in LOSS_OPS and op.file]
    if not ops:
        return Location("", reason="no cross_entropy / nll_loss op was recorded, so the loss's line is unknown "
                        "(a loss written by hand)")
    return Location(ops[-1].module, ops[-1].file, ops[-1].line)
