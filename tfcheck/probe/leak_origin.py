"""Where a leak is born: the first op of a forward whose output at a position moves when a position it must not
see is perturbed.

The flow checks perturb one position per row of a batched pass (row 0 the base, row r the base with position
``changed[r - 1]`` perturbed) and judge the model's output. Recording that same pass with :class:`LeakOrigin` as
the ``on_op`` callback compares every Python-level op output that holds the batch on its first axis and the
sequence on exactly one other axis, row by row with row 0; the first op (in execution order) that changed at a
position q for a pair (q, k) the caller forbids, beyond float rounding, is where the leak begins: for heads
merged without a transpose, the reshape that scrambles positions; for a missing mask, the product of the
attention weights with the values. Score-shaped outputs (the sequence on two axes) are skipped: before the
mask, scores depend on every key by design.
"""
from __future__ import annotations

from typing import Any

import torch

from tfcheck.probe.flow import change_per_position, tolerance
from tfcheck.probe.recorder import OpEvent, tensors_in


class LeakOrigin:
    """``on_op`` callback for a recorded batched perturbation pass; ``first`` is the op where the leak is born."""

    def __init__(self, n: int, changed: list[int], forbidden: torch.Tensor):
        self.n = n
        self.changed = changed  # row r >= 1 perturbed position changed[r - 1]
        self.forbidden = forbidden  # (n, n) bool: [q, k] True when output q must not depend on input k
        self.first: OpEvent | None = None
        self.largest = 0.0
        self.tolerance = 0.0

    def __call__(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        if self.first is not None or event.level != "function" or event.phase != "forward" or event.file is None:
            return
        for t in tensors_in(out):
            change = self._forbidden_change(t)
            if change is not None and change[0] > change[1]:
                self.first, (self.largest, self.tolerance) = event, change
                return

    def _forbidden_change(self, t: torch.Tensor) -> tuple[float, float] | None:
        rows = len(self.changed) + 1
        if not (t.is_floating_point() and t.dim() >= 2 and t.shape[0] == rows):
            return None
        axes = [a for a in range(1, t.dim()) if t.shape[a] == self.n]
        if len(axes) != 1:
            return None
        per_row = t.detach().movedim(axes[0], 1)
        change = change_per_position(per_row[:1].expand_as(per_row[1:]), per_row[1:])  # (rows - 1, n)
        forbidden = self.forbidden[:, self.changed].T.to(change.device)  # (rows - 1, n): [r, q]
        measured = change[forbidden]
        if not measured.numel():
            return None
        return float(measured.max()), tolerance(per_row[0])
