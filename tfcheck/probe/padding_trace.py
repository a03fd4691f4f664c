"""Where a padding mask goes in one recorded forward, and so which line a padding leak asks the user to change.

mask.padding and cross.dependence measure that pads reach real outputs; this names the line. The trace is seeded at
the root call with the padded side's inputs (the source token ids a mask is built from, the padding-mask argument)
and follows them through the model's own conversions with the rule the trial's pad follower uses
(``mask_uses.still_the_mask``: reshaped, compared, converted, combined with another mask, never mixed into hidden
states). Along the way it keeps, from ops and module calls only (never a class or variable name):

- each module call, the user's line that made it and whether it received the mask;
- each op that applies the mask to attention scores (``masked_fill``, ``where``, an addition, the ``attn_mask`` /
  ``key_padding_mask`` of torch's attention), and the ops that built that mask;
- each op that forms attention scores over the padded length (a product, ``scaled_dot_product_attention``,
  torch's multi-head attention).

``blame()`` then reads the line: where a mask reaches the attention of the leaking layer, the op that built it (its
values or its layout are wrong) or that applies it; where none does, the call that passes the layer (or its
attention) no mask while its caller had one, else the scores op that runs without one. Anything the trace cannot
read is skipped: it never makes a forward fail, and a line it cannot find comes back as a reason.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from tfcheck.model.trial.mask_uses import APPLIERS, ATTENTION, is_scores, still_the_mask
from tfcheck.model.trial.observed import SCORE_ADDS
from tfcheck.probe.attention_sites import PRODUCTS
from tfcheck.recording.hooks import Hook, hooked
from tfcheck.recording.recorder import OpEvent, tensors_in, user_line
from tfcheck.report.findings import Location, Related


@dataclass
class TracedCall:
    """One module call: the user's line that made it, and whether any input carried the padding mask."""

    path: str
    parent: int | None
    file: str | None
    line: int | None
    carries: bool


@dataclass
class MaskStep:
    """An op whose output carries the padding mask, and the carried inputs it was made from."""

    event: OpEvent
    inputs: tuple[int, ...]
    shape: tuple[int, ...]


@dataclass
class ScoreOp:
    """An op that forms or masks attention scores over the padded length; ``mask``: the id of the carried mask it
    applies (torch's attention functions form and mask the scores in one call), 0 where it applies none."""

    event: OpEvent
    mask: int = 0


@dataclass
class PaddingTrace:
    """``on_op`` for a Recorder plus module hooks (``hooks()``), for one forward whose inputs have ``batch`` samples
    padded to ``length`` positions."""

    model: nn.Module
    batch: int
    length: int
    calls: list[TracedCall] = field(default_factory=list)
    steps: dict[int, MaskStep] = field(default_factory=dict)  # carried tensor id -> the op that made it
    seeds: set[int] = field(default_factory=set)
    applied: list[ScoreOp] = field(default_factory=list)  # ops applying a carried mask to scores
    scores: list[ScoreOp] = field(default_factory=list)  # ops forming scores over ``length`` keys
    _stack: list[int] = field(default_factory=list)
    _alive: list[torch.Tensor] = field(default_factory=list)

    # ----- recording ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def hooks(self) -> Iterator[PaddingTrace]:
        def pre(path: str):
            def hook(module, args, kwargs):
                tensors = tensors_in((args, kwargs))
                if not self.calls:  # the root call: its padded-side inputs are where the mask comes from
                    self._seed(tensors)
                file, line = user_line()
                self.calls.append(TracedCall(path, self._stack[-1] if self._stack else None, file, line,
                                             any(self.carried(t) for t in tensors)))
                self._stack.append(len(self.calls) - 1)
            return hook

        def post(module, args, output):
            if self._stack:
                self._stack.pop()

        try:
            with hooked(hook for path, module in self.model.named_modules()
                        for hook in (Hook(module, pre(path), pre=True, with_kwargs=True), Hook(module, post))):
                yield self
        finally:
            self._alive = []

    def _seed(self, tensors: list[torch.Tensor]) -> None:
        """The padded side: per-sample tensors with the padded length on an axis (ids, masks), not features."""
        for t in tensors:
            if t.is_nested or t.dim() < 2 or (t.is_floating_point() and t.dim() >= 3 and t.shape[-1] != self.length):
                continue
            if self.batch in t.shape and self.length in t.shape:
                self._keep(t)
                self.seeds.add(id(t))

    def carried(self, t: torch.Tensor) -> bool:
        return id(t) in self.seeds or id(t) in self.steps

    def _keep(self, t: torch.Tensor) -> None:
        self._alive.append(t)  # no id is reused for another tensor while the trace reads ids

    def on_op(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        if not event.model_forward:
            return  # a probe hook's own ops (comparing an embedding's input with the tokens) build no mask
        try:
            self._observe(event, args, kwargs, out)
        except Exception:  # noqa: BLE001 - an op the trace cannot read says nothing; the forward goes on
            return

    def _observe(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        name = event.short_name
        inputs = tensors_in((args, kwargs))
        self._score_op(event, name, args, kwargs, inputs, out)
        carried = [t for t in inputs if self.carried(t)]
        if not carried:
            return
        mask = self._applied_mask(name, args, kwargs, inputs)
        if mask is not None:
            self.applied.append(ScoreOp(event, id(mask)))
            if name in ATTENTION:
                return
        outs = tensors_in(out)
        if mask is None and not still_the_mask(name, len(carried) == len(inputs), outs):
            return
        for o in outs:
            self._keep(o)
            self.steps[id(o)] = MaskStep(event, tuple(id(t) for t in carried), tuple(o.shape))

    def _applied_mask(self, name: str, args: tuple, kwargs: dict, inputs: list) -> torch.Tensor | None:
        """The carried mask this op applies to attention scores, if it does."""
        if name in ATTENTION:
            if _keys(name, inputs) != self.length:
                return None
            found = [kwargs.get(k) for k in ("attn_mask", "key_padding_mask")]
            if name == "scaled_dot_product_attention" and len(args) > 3:
                found.append(args[3])
            return next((m for m in found if isinstance(m, torch.Tensor) and self.carried(m)), None)
        lengths = frozenset({self.length})
        if not any(is_scores(t, lengths) and not self.carried(t) for t in inputs):
            return None
        if name in APPLIERS:
            index = APPLIERS[name][0]
            mask = args[index] if index < len(args) else None
            return mask if isinstance(mask, torch.Tensor) and self.carried(mask) else None
        if name in SCORE_ADDS:
            return next((t for t in inputs if self.carried(t)), None)
        return None

    def _score_op(self, event: OpEvent, name: str, args: tuple, kwargs: dict, inputs: list, out: Any) -> None:
        if name in ATTENTION:
            if _keys(name, inputs) == self.length:
                self.scores.append(ScoreOp(event))
        elif name in PRODUCTS and isinstance(out, torch.Tensor) and is_scores(out, frozenset({self.length})):
            self.scores.append(ScoreOp(event))

    # ----- reading -----------------------------------------------------------------------------------
    def chain_to(self, module: str) -> list[TracedCall]:
        """The calls from the root down to the first call of ``module``; empty when it was never called."""
        index = next((i for i, c in enumerate(self.calls) if c.path == module), None)
        chain: list[TracedCall] = []
        while index is not None:
            chain.append(self.calls[index])
            index = self.calls[index].parent
        return chain[::-1]

    def built(self, mask: int) -> list[MaskStep]:
        """The ops that made the mask ``mask`` (a carried tensor id), from the first to the last."""
        steps: list[MaskStep] = []
        seen: set[int] = set()
        current: int | None = mask
        while current is not None and current in self.steps and current not in seen:
            seen.add(current)
            step = self.steps[current]
            steps.append(step)
            current = step.inputs[0] if step.inputs else None
        return steps[::-1]


#: The role of the first op on the padded inputs that the mask came from (where the model builds it, or first reads
#: the mask it is given).
BUILT = "mask built (the first op on the padded inputs)"


def _keys(name: str, inputs: list) -> int | None:
    """The key length of a call of torch's attention: scaled_dot_product_attention's keys are (..., s, d), torch's
    multi-head attention's (s, b, d)."""
    if len(inputs) < 2 or inputs[1].dim() < 2:
        return None
    return int(inputs[1].shape[-2] if name == "scaled_dot_product_attention" else inputs[1].shape[0])


def _under(event: OpEvent, module: str) -> bool:
    return not module or event.module == module or event.module.startswith(module + ".")


def _line(role: str, event: OpEvent) -> Related:
    return Related(role, event.file, event.line, event.module)


@dataclass
class Blame:
    """The line a padding leak asks the user to change, and the other lines of its story."""

    location: Location
    related: tuple[Related, ...] = ()


def blame(trace: PaddingTrace, layer: str, wrong: str | None = None) -> Blame:
    """The line to change for pads that reach real outputs first in module ``layer`` ('' = the whole model).
    ``wrong``: what the measurement says is wrong with a mask that does reach the scores — 'values' (inverted: the
    op that built it), 'layout' (the query axis: the op that gave it that layout) — or None (where it is applied)."""
    applied = next((a for a in trace.applied if _under(a.event, layer)), None)
    scores = next((s for s in trace.scores if _under(s.event, layer)), None)
    related = [_line("scores computed", scores.event)] if scores is not None else []
    if applied is not None:
        return _blame_applied(trace, layer, applied, wrong, related)
    if trace.applied:  # the mask reaches another attention (the encoder's), not this one
        elsewhere = trace.applied[0]
        related += [_line("mask applied elsewhere", elsewhere.event)]
        related += [_line(BUILT, s.event) for s in trace.built(elsewhere.mask)[:1]]
    if scores is None:
        return Blame(Location(layer, reason=f"no attention over the {trace.length} padded positions was seen in "
                                            f"'{layer or '<root>'}' among the recorded ops"), tuple(related))
    dropped = _dropped(trace, scores.event.module)
    if dropped is not None:
        return Blame(Location(layer, dropped.file, dropped.line), tuple(related))
    return Blame(Location(layer, scores.event.file, scores.event.line), tuple(related))


def _blame_applied(trace: PaddingTrace, layer: str, applied: ScoreOp, wrong: str | None,
                   related: list[Related]) -> Blame:
    steps = trace.built(applied.mask)
    related = [*related, _line("mask applied", applied.event)]
    if steps:
        related.append(_line(BUILT, steps[0].event))
    target = applied.event
    if wrong == "values" and steps:
        target = steps[0].event
    elif wrong == "layout" and steps:
        # the op that gave the mask its (..., length, 1) layout, on the query axis where the key axis was meant
        target = next((s.event for s in steps if len(s.shape) >= 2 and s.shape[-2:] == (trace.length, 1)),
                      steps[0].event)
    if not target.file:
        target = next((s.event for s in steps if s.event.file), applied.event)
    location = Location(layer, target.file, target.line) if target.file else \
        Location(layer, reason="the op that applies the padding mask ran outside the user's code")
    return Blame(location, tuple(r for r in related if (r.file, r.line) != (location.file, location.line)))


def _dropped(trace: PaddingTrace, attention: str) -> TracedCall | None:
    """The outermost call on the way from the root to the module that computes the scores that was given no
    padding mask while its caller had one: the call that drops it."""
    chain = trace.chain_to(attention)
    for caller, call in zip(chain, chain[1:]):
        if caller.carries and not call.carries and call.file:
            return call
    return None
