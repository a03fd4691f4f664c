"""The sequence a strided mixer resamples, in one recorded forward of mask.padding's paired rows.

A leak that passes through a shorter (or longer) sequence than the padded one is seen by LeakOrigin only where it
comes back to the padded length (Canine's molecules repeated back to characters): no op on the way has the padded
length to compare. This keeps, for the ops whose float outputs hold the rows but no axis of the padded length, which
tensors they took, so that the op where the leak is born can be followed back through them to the local mixer that
made them from the padded sequence (a convolution of stride > 1). On the way it notes the attention formed over that
sequence ((..., L, L) scores, torch's attention over L keys) and, for every length, whether a per-sample mask was
applied to such scores: pads pooled into the resampled sequence are a design only where its attention masks them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tfcheck.recording.recorder import OpEvent, tensors_in

#: The torch functions whose output at a position reads a window of neighbouring positions, as padding_design
#: lists them (a strided one resamples the sequence).
RESAMPLERS = frozenset({"conv1d", "conv2d", "conv3d", "conv_transpose1d", "unfold"})
#: Ops that apply a mask to scores given among their operands.
_APPLIES = ("masked_fill", "where", "add", "sub", "mul", "baddbmm")
#: torch's attention functions: the operand holding the keys, and the axis of its length.
_ATTENTION = {"scaled_dot_product_attention": (1, -2), "multi_head_attention_forward": (1, 0)}
#: How many ops the walk back from the leak may visit.
_WALK = 20000


@dataclass(frozen=True)
class Resampling:
    """The strided mixer a leak came through, the length it resampled to, and the attention over that sequence."""

    mixer: OpEvent
    to_length: int
    attention_lengths: tuple[int, ...]  # L of the (..., L, L) attention on the way from the mixer to the leak
    masked: bool  # every such attention has a per-sample mask applied to its scores

    def evidence(self) -> dict:
        return {"to_length": self.to_length, "attention_lengths": list(self.attention_lengths),
                "attention_masked_per_sample": self.masked}


@dataclass
class ResampledSequence:
    """``on_op`` for the recorded forward of ``rows`` rows padded to ``length`` positions."""

    rows: int
    length: int
    produced: dict[int, int] = field(default_factory=dict)  # id(resampled tensor) -> the op that made it
    inputs_of: dict[int, tuple[int, ...]] = field(default_factory=dict)
    events: dict[int, OpEvent] = field(default_factory=dict)
    grid_read: dict[int, int] = field(default_factory=dict)  # op -> the length its padded-length input resampled to
    attention: dict[int, int] = field(default_factory=dict)  # op -> L of the attention it forms or masks
    masked_lengths: set[int] = field(default_factory=set)
    _alive: list[torch.Tensor] = field(default_factory=list)

    def on_op(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        try:
            self._observe(event, args, kwargs, out)
        except Exception:  # noqa: BLE001 - an op this cannot read adds nothing; the forward goes on
            return

    def _observe(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        inputs = tensors_in((args, kwargs))
        self.inputs_of[event.index] = tuple(id(t) for t in inputs)
        self._attention(event, args, kwargs, inputs)
        outs = [t for t in tensors_in(out) if self._resampled(t)]
        if not outs:
            return
        self.events[event.index] = event
        for t in outs:
            self._alive.append(t)  # no id is reused while the walk reads them
            self.produced[id(t)] = event.index
        grid = next((t for t in inputs if self._on_grid(t)), None)
        if grid is not None and event.short_name.lower() in RESAMPLERS:
            axis = next(d for d, s in enumerate(grid.shape) if s == self.length)
            if outs[0].dim() == grid.dim():
                self.grid_read[event.index] = int(outs[0].shape[axis])

    def _on_grid(self, t: torch.Tensor) -> bool:
        """Per position of the padded sequence: an axis of the rows and another of the padded length."""
        shape = tuple(t.shape)
        if self.rows == self.length or self.rows not in shape:
            return False
        return any(s == self.length and d != shape.index(self.rows) for d, s in enumerate(shape))

    def _resampled(self, t: torch.Tensor) -> bool:
        """Hidden states of the rows (an axis of them, or of rows and heads merged first) with no axis of the padded
        length (torch's multi-head attention holds them sequence first)."""
        if not t.is_floating_point() or t.is_nested or t.dim() < 2:
            return False
        shape = tuple(t.shape)
        merged = shape[0] % self.rows == 0
        return (merged or self.rows in shape) and self.length not in (shape[1:] if merged else shape)

    def _attention(self, event: OpEvent, args: tuple, kwargs: dict, inputs: list[torch.Tensor]) -> None:
        name = event.short_name.lower()
        if name in _ATTENTION:
            operand, axis = _ATTENTION[name]
            keys = args[operand] if len(args) > operand else None
            if isinstance(keys, torch.Tensor) and keys.shape[axis] != self.length:
                length = int(keys.shape[axis])
                self.attention[event.index] = length
                masks = [kwargs.get("attn_mask"), kwargs.get("key_padding_mask"), args[3] if len(args) > 3 else None]
                if any(isinstance(m, torch.Tensor) and self._per_sample(m, length, None) for m in masks):
                    self.masked_lengths.add(length)
            return
        scores = [t for t in inputs if t.dim() >= 3 and t.shape[-1] == t.shape[-2] != self.length]
        if not scores:
            return
        length = int(scores[0].shape[-1])
        self.attention[event.index] = length
        if any(k in name for k in _APPLIES):
            largest = max(t.numel() for t in scores)
            if any(self._per_sample(t, length, largest) for t in inputs if t is not scores[0]):
                self.masked_lengths.add(length)

    def _per_sample(self, t: torch.Tensor, length: int, scores_numel: int | None) -> bool:
        """A mask of each row (or row and head) over ``length`` keys, smaller than the scores it masks."""
        if t.dim() < 2 or t.shape[0] % self.rows or t.shape[-1] != length:
            return False
        if scores_numel is not None and t.numel() >= scores_numel:
            return False
        return t.dim() == 2 or t.shape[-2] in (1, length)

    def behind(self, born: OpEvent) -> Resampling | None:
        """The strided mixer that made, from the padded sequence, the resampled tensors ``born`` took (followed back
        through resampled tensors only), with the attention formed on the way; None where there is none."""
        pending = [(i, born.index) for i in self.inputs_of.get(born.index, ())]
        seen: set[int] = set()
        mixers: list[int] = []
        lengths: set[int] = set()
        while pending and len(seen) < _WALK:
            tensor, consumer = pending.pop()
            op = self.produced.get(tensor)
            if op is None or op >= consumer or op in seen:  # a later op with a reused id is no producer
                continue
            seen.add(op)
            if op in self.attention:
                lengths.add(self.attention[op])
            if op in self.grid_read:
                mixers.append(op)
                continue
            pending.extend((i, op) for i in self.inputs_of.get(op, ()))
        if not mixers:
            return None
        first = min(mixers)
        return Resampling(self.events[first], self.grid_read[first], tuple(sorted(lengths)),
                          lengths <= self.masked_lengths)
