"""The trial forward: the facts that only a forward shows, settled once per model before the first check reads
them.

Facts that need one: the layout of a mask the forward requires (the tutorial style takes its masks already laid
out for the attention scores, (b, 1, s) or (b, 1, 1, s), and raises on (batch, length) ones), the reading of an
optional mask argument of a generic name (tfcheck.model.trial.optional_mask), which tensor of the return value
is the output (``output=auto`` until a return value is seen), and a set-up method a forward that raised needs
first (tfcheck.model.trial.set_up). Everything else is settled
without running the model (``tfcheck.model.facts.inference``), so pytest's collection, which decides the items,
runs no forward.

The model layer decides what to try and what to keep; the caller (the engine) runs each forward, counted and
inside its guard, budget and device placement.
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfcheck.model.facts.declarations import MASK_LAYOUTS
from tfcheck.model.facts.under_test import mask_spec
from tfcheck.model.trial import (
    caller_masks,
    capacity,
    flat_outputs,
    head,
    internal_padding,
    optional_mask,
    own_causal_mask,
    sequence_layout,
    set_up,
    target_reading,
    target_vocab,
)
from tfcheck.model.trial.observed import Observed
from tfcheck.model.trial.outputs import infer_output
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest

#: The layouts tried after a required mask in (batch, length) raised, in order.
SCORE_LAYOUTS = ("b1s", "b11s")


@dataclass
class Trial:
    """What the trial forward gave: the return of the forward that ran, or, when it raised in every layout
    tried, the error of the first (the declared or default layout), which forward.smoke reports."""

    result: Any = None
    error: Exception | None = None
    #: the structure the recorded trial forward showed (tfcheck.model.trial.observed); None when none ran
    observed: Observed | None = None
    #: the recorded forward's own return, when the structure it showed changed no fact: its recording is then
    #: the one the checks that read recorded ops would make (the engine keeps it for them)
    recorded: Any = None
    #: the error the forward raised at tfcheck's small sizes, when the model is checked at its defaults instead
    size_constraint: str | None = None

    @property
    def ran(self) -> bool:
        return self.error is None


#: Rules that read the trial forward's structure and settle facts from it, each (subject, observed) -> None.
ADOPTERS: tuple[Callable[[ModelUnderTest, Observed], None], ...] = (
    sequence_layout.adopt,
    target_vocab.adopt,
    caller_masks.adopt,
    own_causal_mask.adopt,
    internal_padding.adopt,
    capacity.adopt_capacity,
    flat_outputs.adopt_flat_output,
    head.adopt_head,
)


def settle(subject: ModelUnderTest, forward: Callable[..., Any], raw_of: Callable[[Any], Any] = lambda r: r,
           model_error: type[Exception] = Exception, describe: Callable[[Exception], str] = str,
           observed_of: Callable[[Any], Observed | None] = lambda r: None) -> Trial:
    """Run ``forward(observe)`` (one forward of the standard probe, built from the subject's current facts,
    recorded when ``observe``), trying
    the other mask layouts when it raises ``model_error`` and nothing declares the layout; keep the layout
    that ran (stated among the assumptions, with ``describe`` of the first error), let the ADOPTERS settle
    what ``observed_of`` its result shows of the model's structure, run the probe again unrecorded (the one the
    checks share), and settle the output's selection from ``raw_of`` the result. Any other
    exception propagates: it is not the model's. A required loss target read as the decoder input is verified
    first (tfcheck.model.trial.target_reading)."""
    target_reading.verify(subject, forward, raw_of, model_error, describe)
    try:
        result = forward(True)
    except model_error as first:
        # A set-up method the forward needs first (tfcheck.model.trial.set_up), before any other reading is tried.
        ran, result = set_up.try_set_up(subject, describe(first), lambda: forward(True), model_error)
        layouts = () if ran else layouts_to_try(subject)
        for layout in layouts:
            set_mask_layout(subject, layout)
            try:
                result = forward(True)
            except model_error:
                continue
            adopt_mask_layout(subject, layout, describe(first))
            break
        else:
            if not ran:
                if layouts:
                    set_mask_layout(subject, None)  # none ran: the error of the (batch, length) masks is the finding
                return Trial(error=first)
    observed = observed_of(result)
    restructured = observed is not None and adopt_structure(subject, observed)
    # After the rules: one may have taken the mask argument away (a sequence-first model's src_mask). The
    # padded forwards are the mask's own; a reading they change reaches the standard probe only through the
    # look-ahead mask's layout, which follows the padding mask's, so any change throws the recording away.
    before = settled(subject.facts)
    optional_mask.settle(subject, forward, model_error, describe, observed_of)
    restructured = restructured or settled(subject.facts) != before
    if observed is not None:
        # The probe the checks share comes from a plain forward: recording changes the path some modules take
        # (torch's fused layers fall back to their Python path under a function mode, and sums round apart by
        # an ulp), and a rule may have changed how the model is called.
        recorded = result
        try:
            result = forward(False)
        except model_error as error:
            return Trial(error=error, observed=observed)
        if not restructured:
            return Trial(result=_read(subject, result, raw_of), observed=observed, recorded=recorded)
    return Trial(result=_read(subject, result, raw_of), observed=observed)


def _read(subject: ModelUnderTest, result: Any, raw_of: Callable[[Any], Any]) -> Any:
    infer_output(subject, raw_of(result))
    return result


def adopt_structure(subject: ModelUnderTest, observed: Observed) -> bool:
    """Every rule's reading of the trial's structure; whether any of them changed a fact (then the recorded
    forward is not the one the checks would make now)."""
    before = settled(subject.facts)
    for adopt in ADOPTERS:
        adopt(subject, observed)
    return settled(subject.facts) != before


#: The facts the ADOPTERS may settle from the trial's structure: a check whose applicability reads one of them
#: may apply after the trial when it did not before (the pytest plugin collects such checks anyway).
SETTLED_BY_TRIAL = frozenset({"mask", "pad_id", "target_pad_id", "target_vocab_size", "output_vocab_size", "causal",
                              "causal_mask", "batch_first", "head", "flat_output", "capacity", "output", "returns"})

#: Facts that leave the trial's probe as it was when they change: the capacity caps longer probes only (a
#: probe of another length is another cache entry anyway).
NOT_IN_THE_PROBE = frozenset({"sources", "capacity"})


def settled(facts: Any) -> dict[str, Any]:
    """The facts' values that make the probe, copied so that a rule changing a list in place shows. A callable
    (an ``inputs`` factory, a learning-rate schedule) is kept as itself: a copy of a ``functools.partial`` never
    equals its original, which read as a changed fact and threw the trial's recording away."""
    return {f.name: _kept(getattr(facts, f.name)) for f in dataclasses.fields(facts) if f.name not in NOT_IN_THE_PROBE}


def _kept(value: Any) -> Any:
    return value if callable(value) else copy.deepcopy(value)


def probe_roles(subject: ModelUnderTest, args: tuple, kwargs: dict) -> dict[int, str]:
    """The identity of each token tensor of a probe's arguments -> its call-plan role (tokens, target_tokens),
    for the observer of the trial forward."""
    roles: dict[int, str] = {}
    positional = iter(args)
    for name, role in subject.facts.call_plan or ():
        value = next(positional, None) if name is None else kwargs.get(name)
        if role in ("tokens", "target_tokens") and value is not None:
            roles[id(value)] = role
    return roles


def layouts_to_try(subject: ModelUnderTest) -> tuple[str, ...]:
    """The other layouts of a mask the forward requires, when nothing declares its layout (or the inputs)."""
    facts = subject.facts
    mask = facts.mask
    required = any(role in ("mask", "causal_mask") for _, role in facts.call_plan or ())
    if mask is None or mask.layout is not None or not required or facts.inputs is not None:
        return ()
    return SCORE_LAYOUTS


def set_mask_layout(subject: ModelUnderTest, layout: str | None) -> None:
    subject.facts.mask = dataclasses.replace(mask_spec(subject), layout=layout)


def adopt_mask_layout(subject: ModelUnderTest, layout: str, first_error: str) -> None:
    """Keep a layout that ran after the (batch, length) one raised, and say so among the assumptions."""
    set_mask_layout(subject, layout)
    mask = mask_spec(subject)
    subject.assumptions.append(Assumption(
        "mask layout", f"{layout} {MASK_LAYOUTS[layout]}",
        f"the forward raised with (batch, length) masks ({first_error}) and ran with these; declare "
        f"mask={mask.argument or 'ARG'}:{mask.convention if mask.argument else 'keep'}:{layout} to state it"))
