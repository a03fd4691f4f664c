"""The look-ahead mask a caller builds (``facts.causal_mask``), settled from the trial forward's structure.

A forward argument named for it (``tgt_mask``, ``trg_mask``, ``causal_mask``, ``look_ahead_mask``,
``subsequent_mask``) or declared with ``causal_mask=ARG`` gets the mask, optional or required, in one rule:

- unless the model builds one itself: the trial forward runs once with an optional such argument at None, and a
  triangle built on a square, ``is_causal=True`` or a triangular buffer sliced there (``Observed.causal_masks``)
  means it does; the argument then stays None and the model's own mask is what mask.causal tests;
- in the convention of the op that consumes it: the trial forward gives it a bool keep mask (True on and below
  the diagonal) and reads how the op it reaches blocks (tfcheck.model.trial.mask_uses). An op that blocks where the
  probe is False reads True as "may attend" (``masked_fill(mask == 0, -1e9)``, scaled_dot_product_attention's
  bool mask): a bool keep mask. Torch's multi-head attention (nn.MultiheadAttention, nn.Transformer*) reads a bool
  True as blocked and documents a float mask: -inf above the diagonal, as generate_square_subsequent_mask builds
  it. A hand-written ``masked_fill(mask, -inf)`` reads True as blocked: a bool mask True above the diagonal. A mask
  added to the scores: the float one. Where no op shows it, a declared padding-mask convention, else keep.

A declared ``causal_mask=ARG:CONVENTION`` is used as declared; a generic name (``mask``, ``attn_mask``) is never
given one by inference, so a decoder that forgot its own mask still fails mask.causal.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

import torch

from tfcheck.model.facts.structure import forward_params
from tfcheck.model.facts.under_test import mask_spec
from tfcheck.model.inputs import causal_mask_spec
from tfcheck.model.trial import optional_mask
from tfcheck.model.trial.mask_uses import MaskUse, keep_pattern
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest
    from tfcheck.model.trial.observed import Observed

#: What each convention gives, as the report says it.
GIVEN = {"keep": "the causal keep mask (True on and below the diagonal)",
         "pad": "the causal mask as blocked positions (True above the diagonal)",
         "additive": "nn.Transformer.generate_square_subsequent_mask(t)"}


def slots(subject: ModelUnderTest) -> list[tuple[int | None, str]]:
    """The call plan's look-ahead-mask slots: (index among the positional arguments or None, parameter)."""
    found, index = [], 0
    spec = causal_mask_spec(subject)
    for name, role in subject.facts.call_plan or ():
        if role == "causal_mask" and spec.argument is not None:
            found.append((index if name is None else None, spec.argument))
        index += name is None
    return found


def optional_unread(subject: ModelUnderTest) -> bool:
    """Whether the trial forward must also run with the look-ahead-mask argument at None: it is optional and not
    declared (a declared one is given as declared)."""
    if "causal_mask" in subject.declared:
        return False
    params = forward_params(subject.model)
    return any(params.get(name) is not None and params[name].default is not inspect.Parameter.empty
               for _, name in slots(subject))


def without_caller_masks(subject: ModelUnderTest, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The probe's arguments with the look-ahead-mask arguments left at None (their default)."""
    args_list, kwargs = list(args), dict(kwargs)
    for index, name in slots(subject):
        if index is not None and index < len(args_list):
            args_list[index] = None
        kwargs.pop(name, None)
    return tuple(args_list), kwargs


def probe_masks(subject: ModelUnderTest, args: tuple, kwargs: dict) -> dict[int, tuple[str, torch.Tensor]]:
    """The identity of each look-ahead mask given in the probe -> (argument, its keep pattern), for the trial's
    observer, when its convention is the consumer's to decide; with the padded probe's optional padding mask
    (tfcheck.model.trial.optional_mask), followed alike."""
    found = optional_mask.probe_masks(subject, args, kwargs)
    if causal_mask_spec(subject).convention:
        return found
    for index, name in slots(subject):
        value: Any = args[index] if index is not None and index < len(args) else kwargs.get(name)
        keep = keep_pattern(value)
        if keep is not None:
            found[id(value)] = (name, keep)
    return found


def adopt(subject: ModelUnderTest, observed: Observed) -> None:
    """Settle the look-ahead mask from the trial's structure (the module docstring's rule)."""
    spec = causal_mask_spec(subject)
    if spec.argument is None or not slots(subject):
        return
    name = spec.argument
    unassisted = observed.unassisted
    if "causal_mask" not in subject.declared and unassisted is not None and unassisted.causal_masks:
        built = unassisted.causal_masks[0]
        subject.facts.set("causal_mask", dataclasses.replace(spec, argument=None, convention="none"),
                          f"the trial forward with {name}=None: {built}")
        subject.facts.call_plan = [(n, r) for n, r in subject.facts.call_plan or () if r != "causal_mask"]
        subject.assumptions.append(Assumption(
            name, "None (the model builds its own look-ahead mask)",
            f"with {name}=None the trial forward built one: {built}; its own mask is what mask.causal tests. "
            f"Declare causal_mask={name} to pass the caller's instead"))
        return
    if spec.convention:
        subject.assumptions.append(Assumption(name, GIVEN.get(spec.convention, spec.convention),
                                              subject.facts.sources.get("causal_mask", "declared")))
        return
    use = next((u for u in observed.caller_mask_uses if u.argument == name), None)
    convention, why = consumer_convention(subject, use)
    subject.facts.set("causal_mask", dataclasses.replace(spec, convention=convention), why)
    subject.assumptions.append(Assumption(name, GIVEN[convention], why))


def consumer_convention(subject: ModelUnderTest, use: MaskUse | None) -> tuple[str, str]:
    """The convention a consumer reads, and why (the module docstring's rule)."""
    role = "forward requires" if required(subject) else "forward takes"
    name = causal_mask_spec(subject).argument
    head = f"{role} {name} (the caller builds the look-ahead mask)"
    if use is not None and use.reads == "keep":
        return "keep", f"{head}; the trial forward's probe mask reached {use}, which blocks where it is False"
    if use is not None and use.reads == "blocked" and use.torch_attention:
        return "additive", (f"{head}; it reaches torch's multi-head attention ({use}), which reads a bool True as "
                            "blocked and takes the float mask (-inf above the diagonal), as torch documents")
    if use is not None and use.reads == "blocked":
        return "pad", f"{head}; the trial forward's probe mask reached {use}, which blocks where it is True"
    if use is not None and use.reads == "additive":
        return "additive", (f"{head}; the trial forward's probe mask is added to the scores at {use}: the float mask "
                            "(-inf above the diagonal)")
    padding = mask_spec(subject)
    if padding.argument is not None and "mask" in subject.declared and padding.convention in GIVEN:
        return padding.convention, f"{head}; no op showed how it is read: the declared padding mask's convention"
    return "keep", (f"{head}; no op showed how it is read, so keep is assumed: declare causal_mask={name}:pad or "
                    f"{name}:additive if not")


def required(subject: ModelUnderTest) -> bool:
    params = forward_params(subject.model)
    name = causal_mask_spec(subject).argument
    return name in params and params[name].default is inspect.Parameter.empty
