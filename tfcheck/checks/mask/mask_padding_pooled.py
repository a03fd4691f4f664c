"""mask.padding on a pooled output: one vector per sample, (batch, C), where the model pools the sequence by design
(a sequence classifier's [CLS] logits; tfcheck.probe.pooled_output reads the op that pools off the shared recorded
forward, as shape.contract does).

The padding contract still holds, per sample instead of per position: other content at a sample's pads must leave
its pooled output unchanged, and a changed real token must change it (the positive control). Only the samples
whose first position is real are judged (padded in the middle and at the end, after the real tokens, as a
tokenizer pads a classifier's batch): a model that pools its first position, a [CLS] token, reads a pad there in
the left-padded sample, by design of that layout. The minimal-example search, which draws any padding, is not run.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from tfcheck.engine.context import ModelRaised
from tfcheck.model.inputs import batch_length
from tfcheck.probe import flow
from tfcheck.probe.pooled_output import LengthAxis, Transition, length_axis

#: Why the left-padded sample is not judged on a pooled output.
NOT_JUDGED = ("the sample padded at the start is not judged: a model that pools its first position (a [CLS] "
              "token) reads a pad there")


def pooling(ctx, out: torch.Tensor, rows: int) -> LengthAxis | None:
    """The pooling behind an output of one ``rows`` x C vector per sample, read off the model's structure; None
    when the output is not that, or the recorded forward shows no pooling (the output stays unreadable)."""
    if out.dim() != 2 or out.shape[0] != rows:
        return None
    try:
        axis = length_axis(ctx)
    except ModelRaised:
        return None
    return axis if axis is not None and axis.pooled and axis.width == out.shape[1] else None


@dataclass(frozen=True)
class PooledStates:
    """What one forward's pooling ops returned and its output, side by side per sample: ``values`` (rows, 1, K), one
    "position" per sample so that mask.padding's per-position measurements compare whole per-sample outputs, and
    ``parts``, the op behind each slice of K (None for the output's own)."""

    axis: LengthAxis
    values: torch.Tensor
    parts: tuple[tuple[Transition | None, slice], ...]


def states(ctx, args: tuple, kwargs: dict, axis: LengthAxis, what: str,
           during: Callable[[], AbstractContextManager] = nullcontext) -> PooledStates:
    """What each pooling op returned (the states the head reads, at their own scale, which a head initialised small
    shrinks below rounding) and the output, in one recorded forward of ``args, kwargs`` under ``during`` (the
    measured perturbation of the pads)."""
    rows, n = batch_length(args, kwargs)
    marks = {(t.file, t.line, t.op): t for t in axis.pooled_by}
    found: list[tuple[Transition | None, torch.Tensor]] = []

    def on_op(event, op_args, op_kwargs, out):
        step = marks.get((event.file, event.line, event.short_name)) if event.model_forward else None
        if step is not None and isinstance(out, torch.Tensor) and out.dim() and out.shape[0] == rows \
                and n not in out.shape[1:]:
            found.append((step, out.detach().reshape(rows, -1).clone()))

    with during():
        probe, _ = ctx.record(args, kwargs, f"{what}, recorded to read what the pooling ops return", on_op=on_op)
    out = probe.output.detach()  # compared in the output's dtype: the tolerance is its rounding
    found.append((None, out.reshape(rows, -1)))
    parts, start = [], 0
    for step, value in found:
        parts.append((step, slice(start, start + value.shape[1])))
        start += value.shape[1]
    return PooledStates(axis, torch.cat([v.to(out.dtype) for _, v in found], dim=1)[:, None], tuple(parts))


def judged(keep: torch.Tensor) -> torch.Tensor:
    """(samples, 1) bool: the samples whose pooled output is judged, those whose first position is real."""
    return keep[:, :1].clone()


def leaking_pool(pooled: PooledStates, a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> Transition | None:
    """The first pooling op (in call order) whose result moved with the pads' content in a judged sample, ``a`` and
    ``b`` the padded samples' values and the same with other pads: where no layer's real outputs moved, the pads
    reach the pooled output there, through the pooling itself (a mean over every position, pads included)."""
    rows = judged(keep).to(a.device)[:, 0]
    for step, part in pooled.parts:
        moved = float((a[rows, :, part] - b[rows, :, part]).abs().max())
        if step is not None and moved > flow.tolerance(a[rows, :, part]):
            return step
    return None


def through(step: Transition) -> str:
    """What a leak born in the pooling op says."""
    return (f" No layer's real outputs moved: the pads reach the pooled output through the pooling at {step.where} "
            f"({step.how}), which reads the padded positions; leave them out of it (weigh the positions by the "
            "mask, or take a real one).")


def evidence(pooled: PooledStates) -> dict:
    return {"pooled": pooled.axis.evidence(), "judged": NOT_JUDGED,
            "compared": "per sample, what each pooling op returns and the output",
            "minimal_example_search": {"result": "not searched: the output is pooled, and the search draws padding "
                                                 "at the start too, which a pooled first position reads"}}


def where(pooled: PooledStates) -> str:
    return f"the model pools the sequence at {pooled.axis.main.describe()}"
