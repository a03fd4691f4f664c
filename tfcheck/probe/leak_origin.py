"""Where a leak is born: the first op of a forward whose output at a position moves when an input it must not
see is perturbed.

The flow checks perturb inputs in the rows of one batched pass and judge the model's output. Recording that
pass, every Python-level op output that holds the rows on one axis and the positions on another is compared row
pair by row pair; the first op (in execution order) that moved at a position the pair forbids, beyond float
rounding, is where the leak begins: for heads merged without a transpose, the reshape that scrambles positions;
for a missing mask, the product of the attention weights with the values. Score-shaped tensors are the caller's
to skip: before the mask, scores depend on every key by design.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tfcheck.probe import flow
from tfcheck.recording.recorder import OpEvent, tensors_in


@dataclass(frozen=True)
class Perturbation:
    """The rows of one batched pass: row ``perturbed[j]`` is row ``base[j]`` with inputs changed that the positions
    marked in ``forbidden[j]`` (a (length,) bool row) must not see."""

    rows: int
    n: int
    base: tuple[int, ...]
    perturbed: tuple[int, ...]
    forbidden: torch.Tensor  # (pairs, n) bool

    @classmethod
    def one_position_each(cls, n: int, positions: Sequence[int]) -> Perturbation:
        """mask.causal's pass: row 0 the base, row j + 1 with ``positions[j]`` changed; earlier positions must not
        move."""
        forbidden = torch.tensor([[q < k for q in range(n)] for k in positions], dtype=torch.bool)
        pairs = len(positions)
        return cls(pairs + 1, n, (0,) * pairs, tuple(range(1, pairs + 1)), forbidden)

    @classmethod
    def paired(cls, keep: torch.Tensor) -> Perturbation:
        """mask.padding's pass: samples ``0..S-1`` padded as ``keep`` (S, n) says (True = real), then the same
        samples with only their pad content changed; real positions must not move."""
        samples, n = keep.shape
        return cls(2 * samples, n, tuple(range(samples)), tuple(range(samples, 2 * samples)), keep.bool().cpu())

    def moved(self, t: torch.Tensor) -> tuple[float, float] | None:
        """(the largest change at a forbidden position, the rounding tolerance) of a per-position tensor of this
        pass, or None when ``t`` is not one (no single axis of the rows, no axis of the positions)."""
        if not t.is_floating_point() or t.dim() < 2 or t.is_nested or self.rows == self.n:
            return None
        rows = [d for d, s in enumerate(t.shape) if s == self.rows]
        lengths = [d for d, s in enumerate(t.shape) if s == self.n and d not in rows]
        if len(rows) != 1 or not lengths:
            return None
        x = t.detach().movedim((rows[0], lengths[0]), (0, 1)).reshape(self.rows, self.n, -1).double()
        base = x[list(self.base)]
        finite = torch.isfinite(base).all(-1)  # a position already non-finite says nothing
        change = (x[list(self.perturbed)] - base).abs().nan_to_num(nan=float("inf")).amax(-1)  # (pairs, n)
        judged = self.forbidden.to(change.device) & finite
        if not bool(judged.any()):
            return None
        reference = torch.where(torch.isfinite(base), base, torch.zeros_like(base)).to(t.dtype)
        return float(change[judged].max()), flow.tolerance(reference)


class LeakOrigin:
    """``on_op`` callback for a recorded pass of a :class:`Perturbation`; ``first`` is the op where the leak is born.
    ``skip(event, tensor)`` says which outputs are not per-position (scores, attention weights)."""

    def __init__(self, perturbation: Perturbation, skip=None):
        self.perturbation = perturbation
        self.skip = skip or _two_position_axes(perturbation.n)
        self.first: OpEvent | None = None
        self.largest = 0.0
        self.tolerance = 0.0

    def __call__(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        # not model_forward: the noise a probe's hook adds moves every position by design
        if self.first is not None or not event.model_forward or event.file is None:
            return
        for t in tensors_in(out):
            if self.skip(event, t):
                continue
            moved = self.perturbation.moved(t)
            if moved is not None and moved[0] > moved[1]:
                self.first, (self.largest, self.tolerance) = event, moved
                return


def _two_position_axes(n: int):
    """Scores and attention weights: the positions on two axes (query, key)."""
    def skip(event: OpEvent, t: torch.Tensor) -> bool:
        return sum(1 for s in t.shape[1:] if s == n) >= 2
    return skip
