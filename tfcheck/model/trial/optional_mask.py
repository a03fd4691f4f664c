"""The reading of an optional padding-mask argument that only a guess gives (a generic name, docs/declarations.md:
``mask``, ``src_mask``, ``pad_mask``, ``padding_mask``, read as a (batch, length) bool keep mask), tested in the trial.

The standard probe has no padding, so it leaves an optional mask out, and the checks that pad (mask.padding,
numerics.nan_source, numerics.half, ...) would be the first forwards to get one: a model that raises on the
guessed layout would be failed for tfcheck's guess. So the trial gives the argument a padded bool keep mask (the
last PADS keys of every sample padded) in each layout of LAYOUTS in turn: (batch, length), (batch, 1, 1, length),
(batch, 1, length, length), (batch, 1, length). A raise is a reason to try the next layout, never a finding. In the
first that runs, the op that applies the mask to the scores (tfcheck.model.trial.mask_uses) settles the
convention only where a bool mask cannot be what it takes: a bool added to the scores blocks nothing (it shifts
them by 0 or 1), so the mask is the float additive one (0 where it keeps, float32's minimum where it masks), run
once more as such before it is kept (a raise moves on to the next layout). Keep against pad is never read from the
op: a model that reads its keep mask inverted is what mask.padding's inverted-convention finding is for.

A reading other than the guess is stated as the ``mask`` assumption, with its evidence. Where no layout runs, the
checks that pad through the argument are inconclusive (``facts.mask_unread``; ``tfcheck.model.inputs.mask_value``
raises MaskUnread), naming the ``mask`` declaration that settles it.
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tfcheck.model.build.names import MASK_ARGS
from tfcheck.model.facts.declarations import MASK_LAYOUTS, MaskSpec
from tfcheck.model.facts.structure import forward_params, library_of
from tfcheck.model.facts.under_test import mask_spec
from tfcheck.model.inputs import batch_length, mask_value
from tfcheck.model.trial.mask_uses import BLOCKING, MaskUse
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest
    from tfcheck.model.trial.observed import Observed

#: The layouts tried, in order. (batch, 1, length) comes last: broadcast against (batch, heads, length, length)
#: scores its batch axis meets the heads, so where the heads number the batch it would run, misaligned.
LAYOUTS = ("bs", "b11s", "b1ss", "b1s")
#: Padded keys at the end of every sample of the probe (the same pattern for each, so that it reads along the key
#: axis in any layout).
PADS = 2
#: The mask argument names whose convention inference reads from the name (Hugging Face's attention_mask, torch's
#: key_padding_mask): every other of names.MASK_ARGS is a guess.
NAMED_CONVENTION = frozenset({"attention_mask", "key_padding_mask", "src_key_padding_mask"})


def guessed(subject: ModelUnderTest) -> bool:
    """Whether the padding mask goes to an optional forward argument whose reading nothing settled: not declared,
    not named for its convention, not x-transformers' documented keep mask, not in the call plan (a required
    mask's layout is tried by the trial itself), and the inputs are tfcheck's."""
    mask, facts = mask_spec(subject), subject.facts
    if mask.argument is None or "mask" in subject.declared or facts.inputs is not None or subject.kind == "attention":
        return False
    if mask.argument not in MASK_ARGS or mask.argument in NAMED_CONVENTION:
        return False
    param = forward_params(subject.model).get(mask.argument)
    optional = param is not None and param.default is not inspect.Parameter.empty
    planned = any(role == "mask" for _, role in facts.call_plan or ())
    return optional and not planned and library_of(subject.model) != "x_transformers"


def padded_probe(subject: ModelUnderTest, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The standard probe's arguments with the mask argument given a padded keep mask in the current reading."""
    batch, length = batch_length(args, kwargs)
    keep = torch.ones(batch, length, dtype=torch.bool, device=subject.device)
    keep[:, max(1, length - PADS):] = False
    return args, {**kwargs, mask_spec(subject).argument: mask_value(subject, keep)}


def probe_masks(subject: ModelUnderTest, args: tuple, kwargs: dict) -> dict[int, tuple[str, torch.Tensor]]:
    """The padded probe's mask -> (argument, its row of keys), for the trial's observer to follow (mask_uses)."""
    name = mask_spec(subject).argument
    value = kwargs.get(name) if name is not None and guessed(subject) else None
    if name is None or not isinstance(value, torch.Tensor) or value.dim() < 1:
        return {}
    keys = value.reshape(-1, value.shape[-1])[0]
    return {id(value): (name, keys if keys.dtype == torch.bool else keys > BLOCKING)}


def settle(subject: ModelUnderTest, forward: Callable[..., Any], model_error: type[Exception],
           describe: Callable[[Exception], str], observed_of: Callable[[Any], Observed | None]) -> None:
    """Try the readings of a guessed optional mask (the module docstring's rule) with ``forward(observe,
    padded=True)``, keep the first that runs, or leave the checks that pad inconclusive."""
    guess = mask_spec(subject)
    if not guessed(subject) or guess.layout is not None or guess.convention != "keep":
        return
    raised: list[str] = []
    for layout in LAYOUTS:
        subject.facts.mask = dataclasses.replace(guess, layout=None if layout == "bs" else layout)
        try:
            observed = observed_of(forward(True, padded=True))
        except model_error as error:
            raised.append(f"{MASK_LAYOUTS[layout]}: {describe(error)}")
            continue
        use = next((u for u in observed.caller_mask_uses if u.argument == guess.argument), None) \
            if observed is not None else None
        if use is not None and use.reads == "additive":
            subject.facts.mask = dataclasses.replace(subject.facts.mask, convention="additive")
            try:
                forward(False, padded=True)
            except model_error as error:
                raised.append(f"{MASK_LAYOUTS[layout]} as the float additive mask: {describe(error)}")
                continue
        return adopt(subject, guess, raised, use)
    subject.facts.mask = guess
    subject.facts.mask_unread = (
        f"{guess.argument} is optional and nothing declares how it takes the padding mask; the trial forward raised "
        f"with a padded bool keep mask in every layout tried ({'; '.join(raised)}). Declare "
        f"mask={guess.argument}:CONVENTION:LAYOUT (CONVENTION keep, pad or additive; LAYOUT one of "
        f"{', '.join(MASK_LAYOUTS)}), or mask=none if it takes no padding mask")
    replace_assumption(subject, f"{guess} (no reading ran)", subject.facts.mask_unread)


def adopt(subject: ModelUnderTest, guess: MaskSpec, raised: list[str], use: MaskUse | None) -> None:
    """Keep the reading that ran; state it where it is not the guess (the (batch, length) bool keep mask)."""
    found = mask_spec(subject)
    if found == guess:
        return
    layout = found.layout or "bs"
    why = f"{guess.argument} is optional and nothing declares how it takes the padding mask; the trial forward"
    why += f" raised with a padded bool keep mask {'; '.join(raised)}, and" if raised else ""
    why += f" ran with it laid out {MASK_LAYOUTS[layout]}"
    if found.convention == "additive" and use is not None:
        why += (f", and {use} adds it to the scores (a bool added blocks nothing): the float additive mask "
                "(0 / float32's minimum), which ran too")
    subject.facts.set("mask", found, why)
    replace_assumption(subject, str(found), f"{why}. Declare mask={found.argument}:{found.convention}:{layout} to "
                       "state it")


def replace_assumption(subject: ModelUnderTest, value: str, source: str) -> None:
    """The ``mask`` assumption inference stated (the guess), replaced by the trial's reading."""
    subject.assumptions[:] = [a for a in subject.assumptions if a.key != "mask"]
    subject.assumptions.append(Assumption("mask", value, source))
