"""Outputs flattened for the loss: forward returns ``logits.view(-1, vocab)``, (batch·length, vocab) rows, as
``F.cross_entropy`` wants them. Seen in the trial forward's return (its shapes, never its values); the checks
then read the rows as (batch, length, vocab) (``tfcheck.model.trial.outputs.unflattened``), stated in the report.

Rows that are not batch × length (only the real tokens kept, the last position dropped) cannot be put back per
position: the checks that read the output per position say so (``unreadable``) instead of judging it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from tfcheck.model.inputs import (
    PROBE_BATCH,  # the trial forward is the standard probe
    TARGET_LENGTH_DELTA,
    batch_length,
)
from tfcheck.model.trial.observed import Observed
from tfcheck.model.trial.outputs import known, returned_output
from tfcheck.report.report import Assumption

if TYPE_CHECKING:
    from tfcheck.model.facts.under_test import ModelUnderTest

#: What a flattened output that cannot be read per position makes a check say, and what to do.
UNREADABLE = ("forward returns its output flattened to {rows} rows, which is not batch × length = {batch} × "
              "{length} (positions dropped, or only real tokens kept), so it cannot be read per position; "
              "return the logits as (batch, length, vocab) from forward and flatten them in the loss")


def adopt_flat_output(subject: ModelUnderTest, observed: Observed) -> None:
    """Settle flat_output from the shape of the trial's output: two axes, the last of width vocab_size or
    d_model, and more rows than samples."""
    if subject.facts.inputs is not None:
        return  # a declared input factory: the length of the output is the factory's
    out = returned_output(subject, observed.returned)
    facts = subject.facts
    widths = known(facts.output_vocab_size, facts.d_model)
    if out is None or len(out.shape) != 2 or out.shape[1] not in widths or out.shape[0] <= PROBE_BATCH:
        return
    rows, width = out.shape
    length = subject.probe_length()
    length = max(1, length + TARGET_LENGTH_DELTA) if subject.takes_target else length
    order = "(length·batch" if facts.batch_first is False else "(batch·length"
    said = f"forward returned {tuple(out.shape)} at batch {PROBE_BATCH}, {'target ' * subject.takes_target}length " \
           f"{length}: the output flattened for the loss, as .view(-1, {width}) does"
    if rows == PROBE_BATCH * length:
        facts.set("flat_output", True, said)
        subject.assumptions.append(Assumption(
            "output layout", f"{order}, {width}) rows read as (batch, length, {width})",
            f"{said}; every check reads it reshaped"))
        return
    facts.set("flat_output", True, said)
    subject.assumptions.append(Assumption(
        "output layout", f"{order}, {width}) rows, not batch × length",
        f"{said}, but {rows} rows are not {PROBE_BATCH} × {length}: the checks that read the output per position "
        "say inconclusive"))


def unreadable(subject: ModelUnderTest, output: torch.Tensor, batch: int, length: int) -> str | None:
    """Why ``output`` of a forward at (batch, output length) cannot be read per position: flattened rows that
    are not batch × length. None when it can (or is no flattened output)."""
    if not subject.facts.flat_output or output.dim() != 2 or output.shape[0] == batch * length:
        return None
    return UNREADABLE.format(rows=output.shape[0], batch=batch, length=length)


def output_size(subject: ModelUnderTest, args: tuple, kwargs: dict) -> tuple[int, int]:
    """The (batch, length) of the output of a forward on these arguments (the checks' layout, before the
    model's): the target's length for a seq2seq call, the primary input's otherwise."""
    positional = iter(args)
    found: dict[str, Any] = {}
    for name, role in subject.facts.call_plan or ():
        value = next(positional, None) if name is None else kwargs.get(name)
        if role in ("target_tokens", "target_features", "tokens", "features"):
            found.setdefault("target" if role.startswith("target") else "primary", value)
    for side in ("target", "primary"):
        value = found.get(side)
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[0]), int(value.shape[1])
    return batch_length(args, kwargs)
