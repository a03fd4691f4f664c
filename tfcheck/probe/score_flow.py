"""Which products of two activations each tensor of a forward was computed from, and which entries of a score
tensor a mask constant wrote.

An attention's softmax normalises what a product of two activations (q·kᵀ) made, possibly scaled, masked,
biased or re-viewed since. A softmax of anything else is not an attention's: linear attentions softmax k over
the sequence as a feature map, and k comes out of a projection. So while the forward runs every tensor gets a
tag: a product of two activations starts a new one (its own op index), a projection (a product with a
parameter) starts an empty one, and any other op passes on the union of its inputs' tags. A tensor no tagged
op made has no tag at all (unknown, not "made by no product").

A mask constant is recognised by its use, whatever its size (-1e4, -1e9, finfo.min, -inf, or a -1e-12 typo):
the value ``masked_fill`` or ``where`` writes into a tagged tensor, or the constant an additive 0/c tensor adds
where the mask is false. Those entries are no longer q·kᵀ times a scale, so the scale fit leaves them out;
whether the constant actually masks is another question (``effective``).
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tfcheck.recording.recorder import OpEvent, tensors_in

#: Products that can form scores or mix values (function level, and aten level inside opaque calls).
PRODUCTS = frozenset({"matmul", "__matmul__", "__rmatmul__", "bmm", "baddbmm", "einsum"})
#: Ops that can be an output projection (one operand a parameter).
PROJECTIONS = frozenset({"linear", "addmm", "mm", "matmul", "__matmul__"})
_FILLS = frozenset({"masked_fill", "masked_fill_"})
_WHERE = frozenset({"where"})
_ADDS = frozenset({"add", "__add__", "__radd__", "__iadd__", "add_"})
_SUBS = frozenset({"sub", "__sub__", "__isub__", "sub_"})
#: exp(fill - row max) below this: the masked key gets no weight worth the name (a -1e-12 fill gets ~1).
EFFECTIVE = 1e-6


@dataclass
class MaskUse:
    """One op that wrote a mask constant into a tagged tensor: which entries (broadcast to its output) and
    the value it gave them."""

    event: OpEvent
    tags: frozenset[int]
    written: torch.Tensor  # bool, the op's output shape
    value: float
    how: str  # "masked_fill", "where", "added"


class ScoreFlow:
    """``on_op`` body for the site collector: the tags of the forward's tensors and the mask constants it
    wrote. ``owned(t)`` says whether ``t`` is a parameter or buffer of the model."""

    def __init__(self, owned: Callable[[torch.Tensor], bool]):
        self._owned = owned
        self._tags: dict[int, tuple[weakref.ref, frozenset[int]]] | None = {}
        self.masks: list[MaskUse] = []

    def tags(self, t: Any) -> frozenset[int] | None:
        """The products ``t`` was computed from; None where no tagged op made it (or the flow broke down)."""
        entry = self._tags.get(id(t)) if isinstance(t, torch.Tensor) and self._tags is not None else None
        return entry[1] if entry is not None and entry[0]() is t else None

    def __call__(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        if event.phase != "forward" or self._tags is None:
            return
        try:
            self._follow(event, args, kwargs, out)
        except Exception:  # noqa: BLE001 - a strange op ends the flow: every tag unknown, sites found by shape
            self._tags, self.masks = None, []

    def _follow(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        inputs = tensors_in((args, kwargs))
        name = event.short_name
        if name in PRODUCTS or name in PROJECTIONS:
            tag: frozenset[int] | None = frozenset() if any(self._owned(t) for t in inputs) \
                else frozenset({event.index})
        else:
            known = [found for t in inputs if (found := self.tags(t)) is not None]
            tag = frozenset().union(*known) if known else None
        if tag is None:
            return
        outputs = tensors_in(out)
        tags = self._tags
        assert tags is not None  # __call__ follows no op once the flow broke down
        for t in outputs:
            try:
                tags[id(t)] = (weakref.ref(t), tag)
            except TypeError:  # a tensor-like without weak references keeps no tag
                continue
        if tag and len(outputs) == 1:
            self._note_mask(event, args, kwargs, outputs[0], tag)

    def _note_mask(self, event: OpEvent, args: tuple, kwargs: dict, out: torch.Tensor, tag: frozenset[int]) -> None:
        try:
            found = _mask_written(event.short_name, args, kwargs, out)
        except (RuntimeError, TypeError, ValueError, IndexError):  # an odd call is no mask
            return
        if found is None:
            return
        if self.masks and self.masks[-1].event.parent_op == event.index:  # the same fill, seen at the aten level
            self.masks.pop()
        written, value, how = found
        self.masks.append(MaskUse(event, tag, written, value, how))


def _mask_written(name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> tuple[torch.Tensor, float, str] | None:
    if name in _FILLS:
        mask = args[1] if len(args) > 1 else kwargs.get("mask")
        value = _constant(args[2] if len(args) > 2 else kwargs.get("value"))
        if isinstance(mask, torch.Tensor) and value is not None:
            return _spread(mask.bool(), out), value, "masked_fill"
        return None
    if name in _WHERE and len(args) == 3 and isinstance(args[0], torch.Tensor):
        when_true, when_false = _constant(args[1]), _constant(args[2])
        if (when_true is None) == (when_false is None):  # both constants or neither: no scores kept
            return None
        cond = args[0].bool()
        written, value = (cond, when_true) if when_true is not None else (~cond, when_false)
        assert value is not None  # one of the two is a constant
        return _spread(written, out), value, "where"
    if name in _ADDS or name in _SUBS:
        sign = -1.0 if name in _SUBS else 1.0
        candidates = [a for a in args[:2] if isinstance(a, torch.Tensor) and a.numel() <= out.numel()]
        for added in candidates[1:] if name in _SUBS else candidates:
            found = _zero_or_constant(added, sign)
            if found is not None:
                return _spread(found[0], out), found[1], "added"
    return None


def _constant(value: Any) -> float | None:
    """A plain number, or a tensor holding one value throughout."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() >= 1 and value.is_floating_point():
        first = value.reshape(-1)[0]
        if bool((value == first).all()) or (bool(torch.isnan(first)) and bool(torch.isnan(value).all())):
            return float(first)
    return None


def _zero_or_constant(t: torch.Tensor, sign: float) -> tuple[torch.Tensor, float] | None:
    """An additive mask: 0 where it keeps and one negative constant c where it masks (c = -inf included).
    (entries equal to c, sign · c) or None."""
    if not t.is_floating_point() or t.numel() < 2:
        return None
    values = torch.unique(t.detach())
    if values.numel() != 2 or not bool((values == 0).any()):
        return None
    c = float(values[values != 0][0])
    if sign * c >= 0:
        return None
    return t == c, sign * c


def _spread(written: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.broadcast_to(written, out.shape).clone()


def written_into(masks: Sequence[MaskUse], score: OpEvent, softmax: OpEvent | None,
                 logits: torch.Tensor | None) -> tuple[torch.Tensor | None, tuple[dict, ...]]:
    """The entries of one site's softmax input a mask constant wrote on the way from its score product (ops
    tagged with it, laid out as the softmax input), and a note on each constant; (None, ()) where none did."""
    if logits is None:
        return None, ()
    end = softmax.index if softmax is not None else math.inf
    uses = [m for m in masks if score.index in m.tags and score.index < m.event.index < end
            and tuple(m.written.shape) == tuple(logits.shape)]
    if not uses:
        return None, ()
    notes = tuple({"value": u.value, "how": u.how, "line": u.event.line, "entries": int(u.written.sum()),
                   "masks": effective(u, logits)} for u in uses[:4])
    return torch.stack([u.written for u in uses]).any(0), notes


def effective(use: MaskUse, logits: torch.Tensor) -> bool:
    """Whether the constant masks: exp(masked logit - the row's max) below ``EFFECTIVE`` in the dtype the
    softmax ran in (a -1e9 that became -inf in float16 masks too; a -1e-12 does not)."""
    rows = logits.detach()
    exponent = rows - rows.amax(dim=-1, keepdim=True)
    weights = torch.exp(exponent.float())[use.written]
    return bool(weights.numel() == 0 or (weights.nan_to_num(0.0) < EFFECTIVE).all())
