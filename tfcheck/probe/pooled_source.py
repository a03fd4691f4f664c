"""The per-position tensor a pooled output is made from: the states (batch, length, ...) that the model's own pooling
op reads (``h`` of ``h[:, 0]`` in a [CLS] classifier, the states a mean pools), named by the module that returned
them.

A check that measures per position (a permutation of the tokens, the real positions of a padded batch) cannot read
a (batch, C) output; it can read these states instead. They are found the way the pooling is
(tfcheck.probe.pooled_output, off the shared recorded forward, never off names) and captured in the check's own
forward at the op that pools, matched by its source line and name, so any batch and length can be measured. No
pooling found, or no op matched in the check's forward: nothing is captured, and the check stays inconclusive.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tfcheck.probe import recorded_probe
from tfcheck.probe.pooled_output import Transition, length_axis


@dataclass(frozen=True)
class PooledSource:
    """Where the positions a pooled output is made from are read: the pooling op, the module whose output they are,
    and which axes of that tensor are the batch and the length."""

    step: Transition
    module: str | None  # the module whose output the states are; None when they are no module's output
    batch_axis: int
    length_axis: int

    @property
    def name(self) -> str:
        """'the output of 'encoder.layers.1'', or the pooling op's input where no module returned the states."""
        if self.module is not None:
            return f"the output of '{self.module or '<root>'}'"
        code = self.step.code()
        return f"the input of {f'`{code}`' if code else self.step.op} at {self.step.where}"

    def describe(self) -> str:
        return f"{self.name}, the per-position states the pooled output is made from ({self.step.how} at " \
               f"{self.step.where})"

    def evidence(self) -> dict:
        return {"tensor": self.name, "module": self.module, "pooled_at": self.step.evidence(),
                "layout": {"batch_axis": self.batch_axis, "length_axis": self.length_axis}}

    def capture(self, batch: int, length: int) -> Capture:
        """An ``on_op`` observer catching these states in a forward at ``batch`` x ``length``."""
        return Capture(self, batch, length)


def find(ctx) -> PooledSource | None:
    """The states behind the standard probe's pooled output; None when the output is not pooled by an op of the
    model (it keeps a length axis or loses it by a fold). A raise of the shared recorded forward reaches the
    caller, the check that owns the measurement (a probe does not judge the model's errors)."""
    axis = length_axis(ctx)
    if axis is None or not axis.pooled:
        return None
    shared = recorded_probe.shared(ctx)
    step, recording = axis.main, shared.recording
    batch, length = shared.probe.batch, shared.probe.length
    if batch == length:
        return None  # the axes cannot be told apart by their sizes
    for op in reversed(recording.ops):  # the last such op: the one nearest the output
        if not (op.model_forward and (op.file, op.line, op.short_name) == (step.file, step.line, step.op)):
            continue
        for meta, tensor in zip(op.inputs, op.input_ids):
            if meta.shape != step.source:
                continue
            axes = _axes(meta.shape, batch, length)
            if axes is None:
                continue
            returned = [c for c in recording.calls if tensor in c.output_ids and c.parent is not None]
            # The outermost module that returned them (an encoder rather than its last layer): the reader's name.
            module = min(returned, key=lambda c: c.depth).path if returned else None
            return PooledSource(step, module, *axes)
    return None


def _axes(shape: tuple[int, ...], batch: int, length: int) -> tuple[int, int] | None:
    batch_axis = 0 if shape and shape[0] == batch else 1 if len(shape) > 1 and shape[1] == batch else None
    if batch_axis is None:
        return None
    length_axis = next((i for i, n in enumerate(shape) if n == length and i != batch_axis), None)
    return None if length_axis is None else (batch_axis, length_axis)


class Capture:
    """``on_op``: the states at the pooling op, in a forward at ``batch`` x ``length`` (kept with their graph, so a
    loss can be taken on them); ``states`` gives them laid out (batch, length, ...)."""

    def __init__(self, source: PooledSource, batch: int, length: int):
        self.source, self.batch, self.length = source, batch, length
        self.value: torch.Tensor | None = None

    def __call__(self, event, args, kwargs, out) -> None:
        step = self.source.step
        if not event.model_forward or (event.file, event.line, event.short_name) != (step.file, step.line, step.op):
            return
        # The states' shape at this batch and length: the same line may pool other tensors (a masked mean's count
        # of the real tokens, (b, s, 1), beside its sum of the states, (b, s, d)).
        wanted = list(step.source)
        wanted[self.source.batch_axis], wanted[self.source.length_axis] = self.batch, self.length
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, torch.Tensor) and list(arg.shape) == wanted and arg.is_floating_point():
                self.value = arg  # the last call wins, as in ``find``
                return

    @property
    def states(self) -> torch.Tensor | None:
        if self.value is None:
            return None
        return self.value.movedim((self.source.batch_axis, self.source.length_axis), (0, 1))
