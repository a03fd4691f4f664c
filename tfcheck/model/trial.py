"""The trial forward: the facts that only a forward shows, settled once per model before the first check reads
them.

Two facts need one: the layout of a mask the forward requires (the tutorial style takes its masks already laid
out for the attention scores, (b, 1, s) or (b, 1, 1, s), and raises on (batch, length) ones), and which tensor
of the return value is the output (``output=auto`` until a return value is seen). Everything else is settled
without running the model (``tfcheck.model.inference``), so pytest's collection, which decides the items,
runs no forward.

The model layer decides what to try and what to keep; the caller (the engine) runs each forward, counted and
inside its guard, budget and device placement.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfcheck.model.declarations import MASK_LAYOUTS
from tfcheck.model.inputs import mask_spec
from tfcheck.model.outputs import infer_output
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.subject import Subject

#: The layouts tried after a required mask in (batch, length) raised, in order.
SCORE_LAYOUTS = ("b1s", "b11s")


@dataclass
class Trial:
    """What the trial forward gave: the return of the forward that ran, or, when it raised in every layout
    tried, the error of the first (the declared or default layout), which forward.smoke reports."""

    result: Any = None
    error: Exception | None = None

    @property
    def ran(self) -> bool:
        return self.error is None


def settle(subject: Subject, forward: Callable[[], Any], raw_of: Callable[[Any], Any] = lambda r: r,
           model_error: type[Exception] = Exception,
           describe: Callable[[Exception], str] = str) -> Trial:
    """Run ``forward()`` (one forward of the standard probe, built from the subject's current facts), trying
    the other mask layouts when it raises ``model_error`` and nothing declares the layout; keep the layout
    that ran (stated among the assumptions, with ``describe`` of the first error), and settle the output's
    selection from ``raw_of`` its result. Any other exception propagates: it is not the model's."""
    try:
        result = forward()
    except model_error as first:
        layouts = layouts_to_try(subject)
        for layout in layouts:
            set_mask_layout(subject, layout)
            try:
                result = forward()
            except model_error:
                continue
            adopt_mask_layout(subject, layout, describe(first))
            break
        else:
            if layouts:
                set_mask_layout(subject, None)  # none ran: the error of the (batch, length) masks is the finding
            return Trial(error=first)
    infer_output(subject, raw_of(result))
    return Trial(result=result)


def layouts_to_try(subject: Subject) -> tuple[str, ...]:
    """The other layouts of a mask the forward requires, when nothing declares its layout (or the inputs)."""
    facts = subject.facts
    mask = facts.mask
    required = any(role in ("mask", "causal_mask") for _, role in facts.call_plan or ())
    if mask is None or mask.layout is not None or not required or facts.inputs is not None:
        return ()
    return SCORE_LAYOUTS


def set_mask_layout(subject: Subject, layout: str | None) -> None:
    subject.facts.mask = dataclasses.replace(mask_spec(subject), layout=layout)


def adopt_mask_layout(subject: Subject, layout: str, first_error: str) -> None:
    """Keep a layout that ran after the (batch, length) one raised, and say so among the assumptions."""
    set_mask_layout(subject, layout)
    mask = mask_spec(subject)
    subject.assumptions.append(Assumption(
        "mask layout", f"{layout} {MASK_LAYOUTS[layout]}",
        f"the forward raised with (batch, length) masks ({first_error}) and ran with these; declare "
        f"mask={mask.argument or 'ARG'}:{mask.convention if mask.argument else 'keep'}:{layout} to state it"))
