"""Which part of a concatenation a slice of it takes, so that dependence can be followed part by part.

tfcheck.probe.param_flow counts an op's outputs as computed from traced values when any input is. For a
concatenation read back in pieces this over-approximates in a way that matters: a model that packs its padding mask
beside its keys as one more channel (``cat([keys, gates, mask[..., None]], -1)``, so that one cache holds both) and
reads the mask back (``packed[..., -1].bool()``, ``split(packed, [d, d, 1], -1)``) would seem to turn the keys into
a boolean selection. Recording, for each concatenation, the span each input fills along its axis, and for each
slice of it the window it takes along that axis, tells that window apart: it holds none of the traced parts, so
nothing in it is computed from them.

Only windows that can be read exactly are used (integers, slices, Ellipsis and None in an index; split, chunk,
narrow, select, unbind); any other index (a tensor) keeps the over-approximation, which errs towards a failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tfcheck.recording.recorder import OpEvent, tensors_in

#: Ops that join their tensor arguments end to end along one axis.
CONCATS = frozenset({"cat", "concat", "concatenate"})
#: Ops whose outputs are windows of their first argument along one axis.
SLICES = frozenset({"__getitem__", "split", "split_with_sizes", "chunk", "narrow", "select", "unbind"})

Span = tuple[int, int]  # [start, stop) along the concatenation's axis


@dataclass
class ConcatWindows:
    """An ``on_op`` observer of one recorded forward (tensor identities kept alive by the recorder)."""

    spans: dict[int, tuple[Span, ...]] = field(default_factory=dict)  # cat op index -> span of each tensor input
    taken: dict[int, tuple[int, tuple[Span | None, ...]]] = field(default_factory=dict)  # slice op -> (cat, windows)
    _made_by: dict[int, tuple[int, int]] = field(default_factory=dict)  # id(cat output) -> (cat op index, axis)

    def on_op(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        try:
            name = event.short_name
            if name in CONCATS and isinstance(out, torch.Tensor):
                self._concatenation(event, args, kwargs, out)
            elif name in SLICES and args and isinstance(args[0], torch.Tensor) and id(args[0]) in self._made_by:
                cat, axis = self._made_by[id(args[0])]
                windows = _windows(name, args, kwargs, tuple(args[0].shape), axis, len(tensors_in(out)))
                if windows is not None:
                    self.taken[event.index] = (cat, windows)
        except Exception:  # noqa: BLE001 - a call this cannot read keeps the over-approximation
            return

    def _concatenation(self, event: OpEvent, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
        parts = args[0] if args else kwargs.get("tensors")
        if not isinstance(parts, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in parts):
            return
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        if not isinstance(dim, int) or out.dim() == 0:
            return
        axis = dim % out.dim()
        spans, start = [], 0
        for t in parts:
            size = t.shape[axis] if t.dim() == out.dim() else 0  # a 1-d empty tensor is skipped by cat
            spans.append((start, start + size))
            start += size
        self.spans[event.index] = tuple(spans)
        self._made_by[id(out)] = (event.index, axis)

    def follower(self) -> Follower:
        return Follower(self)


@dataclass
class Follower:
    """Per trace: which spans of each concatenation hold traced tensors, and so which windows of it do not."""

    windows: ConcatWindows
    traced_spans: dict[int, tuple[Span, ...]] = field(default_factory=dict)

    def derived(self, op: OpEvent, holds) -> list[bool]:
        """For each output of ``op``, whether it may hold values computed from the traced tensors (``holds``: a
        tensor id -> bool); False only for a window of a concatenation that holds none of its traced parts."""
        outputs = [True] * len(op.output_ids)
        spans = self.windows.spans.get(op.index)
        if spans is not None and len(spans) == len(op.input_ids):
            self.traced_spans[op.index] = tuple(s for s, i in zip(spans, op.input_ids) if holds(i))
        taken = self.windows.taken.get(op.index)
        if taken is None or [i for i in op.input_ids if holds(i)] != list(op.input_ids[:1]):
            return outputs  # not a window, or traced values come in through something else than the slice taken
        cat, windows = taken
        traced = self.traced_spans.get(cat)
        if traced is None or len(windows) != len(outputs):
            return outputs
        return [w is None or any(_overlap(w, s) for s in traced) for w in windows]


def _overlap(a: Span, b: Span) -> bool:
    return max(a[0], b[0]) < min(a[1], b[1])


def _windows(name: str, args: tuple, kwargs: dict, shape: tuple[int, ...], axis: int,
             count: int) -> tuple[Span | None, ...] | None:
    """The span along ``axis`` each of the ``count`` outputs of the slicing call takes of its first argument."""
    size = shape[axis]
    if name == "__getitem__":
        return (_index_window(args[1], shape, axis),) if len(args) > 1 else None
    dim = _argument(args, kwargs, 2, "dim", 0)
    if name in ("narrow", "select", "unbind"):
        dim = _argument(args, kwargs, 1, "dim", 0)
    if not isinstance(dim, int):
        return None
    if dim % len(shape) != axis:  # it cuts another axis: every output spans all of this one
        return ((0, size),) * count
    if name == "narrow":
        start, length = _argument(args, kwargs, 2, "start", 0), _argument(args, kwargs, 3, "length", 0)
        start = start % size if isinstance(start, int) else None
        return ((start, start + length),) if start is not None and isinstance(length, int) else None
    if name == "select":
        index = _argument(args, kwargs, 2, "index", 0)
        return ((index % size, index % size + 1),) if isinstance(index, int) else None
    if name == "unbind":
        return tuple((i, i + 1) for i in range(size))
    sections = _argument(args, kwargs, 1, "split_size_or_sections", None)
    if sections is None:
        sections = kwargs.get("split_size", kwargs.get("split_sizes", kwargs.get("chunks")))
    if name == "chunk" and isinstance(sections, int):
        sections = -(-size // sections)  # chunk's pieces are of ceil(size / chunks)
    if isinstance(sections, int) and sections > 0:
        sections = [min(sections, size - s) for s in range(0, size, sections)]
    if not isinstance(sections, (list, tuple)) or len(sections) != count:
        return None
    starts = [sum(sections[:i]) for i in range(count)]
    return tuple((s, s + n) for s, n in zip(starts, sections))


def _argument(args: tuple, kwargs: dict, position: int, name: str, default: Any) -> Any:
    return args[position] if len(args) > position else kwargs.get(name, default)


def _index_window(index: Any, shape: tuple[int, ...], axis: int) -> Span | None:
    """The span along ``axis`` a basic index (ints, slices, Ellipsis, None) takes; None for any other index (or a
    strided slice, whose elements a span cannot say)."""
    items = index if isinstance(index, tuple) else (index,)
    if not all(i is None or i is Ellipsis or isinstance(i, slice) or (isinstance(i, int) and not isinstance(i, bool))
               for i in items):
        return None
    consuming = sum(1 for i in items if i is not None and i is not Ellipsis)
    dim = 0
    for item in items:
        if item is None:
            continue
        if item is Ellipsis:
            dim += len(shape) - consuming
            continue
        if dim == axis:
            return _item_window(item, shape[axis])
        dim += 1
    return (0, shape[axis])  # the index stops before this axis: all of it is taken


def _item_window(item: int | slice, size: int) -> Span | None:
    if isinstance(item, int):
        return (item % size, item % size + 1)
    start, stop, step = item.indices(size)
    if step != 1:
        return None
    return (start, max(start, stop))
