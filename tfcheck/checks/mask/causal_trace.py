"""The recorded forward of mask.causal's perturbed batch, as a graph of the ops that made each tensor.

``CausalTrace`` is an ``on_op`` observer. For every tensor an op makes it keeps a ``Node``: which op made it from
which tensors, the user's line, the module it ran in, and the line of the model's own code that ran it; never the
tensor itself (a weak reference tells a live tensor from a freed one whose id was reused). From the stream it reads
where the leak first appears (the recorded batch is the measured one: row 0 the base sequence, row j + 1 with one
position changed, so an op whose per-position output moves before the changed position is where the leak is born)
and the statistics taken over the sequence axis; the attention sites and their masks are read by a
``causal_masks.MaskReader`` it feeds.

Which line is "the model's own" (``Node.own``): the innermost frame of the user's code that runs a method of one of
the model's modules. A mask made inside a shared helper (``padding_mask(tokens, pad_id)``) is then named where the
model calls it (``return padding_mask(...) & causal`` in ``build_mask``), the line a user changes to combine or
build the mask, while the helper's own line, innermost, stays in ``Node.file``/``Node.line``.
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from tfcheck.checks.mask.causal_masks import MaskReader
from tfcheck.checks.mask.causal_nodes import Node, Site
from tfcheck.frames import is_user_frame
from tfcheck.probe.leak_origin import Perturbation
from tfcheck.recording.recorder import OpEvent, tensors_in

_STATISTICS = frozenset({"mean", "var", "std", "sum", "amax", "max", "norm", "var_mean", "std_mean", "cumsum"})


@dataclass
class Clue:
    """An op that explains a leak by itself (a statistic over the sequence axis)."""

    index: int
    op: str
    file: str | None
    line: int | None
    module: str
    detail: str


class CausalTrace:
    """``on_op`` for the recorded forward of the perturbed batch: ``len(positions) + 1`` rows of length ``n``,
    row j + 1 with ``positions[j]`` changed. ``layer`` is the first leaking layer's path (None when unknown);
    ``given`` names the tensors the forward was given (id -> "argument 'tgt_mask'"); ``reader`` reads the attention
    sites and their masks from the same stream."""

    def __init__(self, model: torch.nn.Module, n: int, positions: list[int], layer: str | None, reader: MaskReader,
                 given: dict[int, str] | None = None):
        self.n, self.layer, self.reader = n, layer, reader
        self._perturbation = Perturbation.one_position_each(n, positions)
        self._modules = {id(m): path for path, m in model.named_modules()}
        self._layer_module = dict(model.named_modules()).get(layer) if layer is not None else None
        self._owned = {id(t): f"buffer '{name}'" for name, t in model.named_buffers()}
        self._owned.update({id(t): f"parameter '{name}'" for name, t in model.named_parameters()})
        self._given = dict(given or {})
        self._made: dict[int, tuple[weakref.ref, Node]] = {}
        self.clues: list[Clue] = []
        #: the earliest op whose per-position output moved before the position changed: where the leak is born
        self.first_leak: Node | None = None

    @property
    def sites(self) -> list[Site]:
        return self.reader.sites

    def on_op(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        if not event.model_forward:
            return
        try:
            self._observe(event, args, kwargs, out)
        except Exception:  # noqa: BLE001 - an op the rules cannot read says nothing; the forward goes on
            return

    def _observe(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        inputs = tensors_in((args, kwargs))
        outs = [o for o in tensors_in(out) if isinstance(o, torch.Tensor)]
        parents = tuple(self.node_of(t) for t in inputs)
        sources = tuple(self.source_of(t) if p is None else None for t, p in zip(inputs, parents))
        first = outs[0] if outs else None
        node = Node(event.index, event.short_name, event.file, event.line, event.module, parents, sources,
                    tuple(first.shape) if first is not None else (),
                    bool(first is not None and first.is_floating_point()))
        if first is not None and self._mask_like(first):
            node.masky = True
            node.own = self.own_line()
        self.reader.observe(self, node, args, kwargs, inputs, parents, first)
        self._statistics(event, args, kwargs, parents[0] if parents else None)
        for o in outs:
            self._made[id(o)] = (weakref.ref(o), node)
        if self.first_leak is None and any(self._leaks(o, node) for o in outs):
            self.first_leak = node

    def node_of(self, t: torch.Tensor) -> Node | None:
        entry = self._made.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def source_of(self, t: torch.Tensor) -> str | None:
        return self._owned.get(id(t)) or self._given.get(id(t))

    def _mask_like(self, t: torch.Tensor) -> bool:
        """Could be (part of) a mask: not floating, or laid out (length, length), (length, 1), (1, length)."""
        if not t.is_floating_point():
            return True
        n = self.n
        last = tuple(t.shape[-2:]) if t.dim() >= 2 else (1, int(t.shape[0])) if t.dim() == 1 else ()
        return last in ((n, n), (n, 1), (1, n))

    def own_line(self) -> tuple[str | None, int | None]:
        """The line of the model's own code running now (the module docstring's rule), else the innermost frame of
        the user's code."""
        frame: FrameType | None = sys._getframe()
        first: tuple[str | None, int | None] = (None, None)
        while frame is not None:
            code = frame.f_code
            if is_user_frame(code.co_filename):
                if first[0] is None:
                    first = (code.co_filename, frame.f_lineno)
                if ("self" in code.co_varnames or "self" in code.co_freevars) and \
                        id(frame.f_locals.get("self")) in self._modules:
                    return code.co_filename, frame.f_lineno
            frame = frame.f_back
        return first

    def layer_line(self) -> tuple[str | None, int | None]:
        """The line of the first leaking layer's own code (a frame whose ``self`` is the layer) running now."""
        if self._layer_module is None:
            return None, None
        frame: FrameType | None = sys._getframe()
        while frame is not None:
            code = frame.f_code
            if ("self" in code.co_varnames or "self" in code.co_freevars) and is_user_frame(code.co_filename) \
                    and frame.f_locals.get("self") is self._layer_module:
                return code.co_filename, frame.f_lineno
            frame = frame.f_back
        return None, None

    def _leaks(self, t: torch.Tensor, node: Node) -> bool:
        """A per-position output that moves, in some row, at a position before the one changed in that row. Scores
        and weights, (query, key), are not per position: a later key's column changes in a correct model too."""
        if node.scores:
            return False
        moved = self._perturbation.moved(t)
        return moved is not None and moved[0] > moved[1]

    def _statistics(self, event: OpEvent, args: tuple, kwargs: dict, made: Node | None) -> None:
        """A normalisation or a reduction over the sequence axis of a (batch, length, features) tensor."""
        name = event.short_name
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if x is None or x.dim() != 3 or x.shape[1] != self.n or not x.is_floating_point() or \
                (made is not None and made.scores):
            return
        detail = None
        if name in ("layer_norm", "group_norm"):
            shape = kwargs.get("normalized_shape", args[1] if len(args) > 1 else None)
            if isinstance(shape, (tuple, list, torch.Size)) and len(shape) >= 2:
                detail = f"layer_norm over {tuple(shape)}, which includes the sequence axis"
        elif name in _STATISTICS:
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            dims = dim if isinstance(dim, (tuple, list)) else (dim,)
            if any(isinstance(d, int) and d in (1, -2) for d in dims):
                detail = f"{name} over dim {dim} of a {tuple(x.shape)} tensor (the sequence axis)"
        if detail is not None:
            self.clues.append(Clue(event.index, name, event.file, event.line, event.module, detail))
