"""What the trial forward shows of a model's structure: the objects a model builds from the length of its
input, the masks it builds itself, the ids it compares its tokens with, and the modules that ran.

These are read from the *structure* of one recorded forward (which op made what, from which tensor, at which
line), never from the values a check measures: a look-ahead mask is "built" when the forward calls
``tril`` / ``triu`` on a square, asks for ``is_causal=True`` or slices a triangular buffer, not when the output
happens not to depend on the future. The model layer's rules (``tfcheck.model.trial.trial``) decide what to do with
each sighting.

The observer runs inside a recorded forward (``tfcheck.recording.recorder.Recorder``'s ``on_op``): it tracks
tensor identities itself and keeps the tensors it tracks alive, so an id is never reused for another tensor
while it is recorded. Anything it cannot read is skipped: an observer never makes a forward fail.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from tfcheck.frames import short_path
from tfcheck.model.trial.mask_uses import ADDS, APPLIERS, ATTENTION, MaskFollower, MaskUse, is_scores, still_the_mask
from tfcheck.recording.recorder import OpEvent, Recording, tensors_in

#: Comparisons of token ids with a special id (x == pad, x != pad_idx).
COMPARISONS = frozenset({"eq", "ne", "__eq__", "__ne__"})
#: Ops that build a look-ahead mask from a square.
TRIANGLES = frozenset({"tril", "triu", "tril_", "triu_"})
#: Ops that apply a mask to attention scores: (op, index of the mask among the positional arguments).
MASK_APPLIERS = {name: index for name, (index, _) in APPLIERS.items()}
#: A padding mask reaches the scores also when subtracted from them ((1 - mask) * 1e9).
SCORE_ADDS = ADDS | {"sub", "__sub__"}
ATTENTIONS = frozenset(ATTENTION)
SOFTMAXES = frozenset({"softmax", "_softmax"})


@dataclass(frozen=True)
class Sighting:
    """One structural fact the trial forward showed."""

    what: str  # what was seen, as the report says it ("torch.tril on a (7, 7) square")
    where: str  # the user's line that did it (path:line), or the module it ran in
    size: int | None = None  # the rows of a table, the side of a square, an id compared with
    length: int | None = None  # the length the object was made for (a slice's stop, a square's side)
    role: str | None = None  # the probe input it came from ("tokens", "target_tokens")

    def __str__(self) -> str:
        return f"{self.what} ({self.where})"


@dataclass
class Observed:
    """What one recorded trial forward showed (see the module docstring)."""

    #: module paths that ran (the model itself is "")
    called: frozenset[str] = frozenset()
    #: the model builds a look-ahead mask itself: triangles, is_causal=True, a triangular buffer sliced
    causal_masks: list[Sighting] = field(default_factory=list)
    #: token ids compared with a scalar id whose result reached attention scores (size: the id; role: the side)
    pad_comparisons: list[Sighting] = field(default_factory=list)
    #: tables indexed or sliced by position (size: their rows; length: the length they were cut to)
    position_tables: list[Sighting] = field(default_factory=list)
    #: objects made for the input's length (a square mask, a table slice, positions fed to an embedding)
    length_objects: list[Sighting] = field(default_factory=list)
    #: the shapes of what forward returned (tfcheck.recording.recorder.describe: TensorMeta, lists, dicts)
    returned: Any = None
    #: the key lengths attention ran over: a softmax's last axis, the keys of torch's attention functions
    attention_lengths: set[int] = field(default_factory=set)
    #: the embedding tables the token ids read (size: their rows; role: the side, "tokens" or "target_tokens")
    token_tables: list[Sighting] = field(default_factory=list)
    #: the first op each look-ahead mask the caller gives reached (tfcheck.model.trial.mask_uses)
    caller_mask_uses: list[MaskUse] = field(default_factory=list)
    #: the same trial forward with the caller's optional look-ahead mask arguments left at None (what the model
    #: builds without them); None when the forward takes no such argument
    unassisted: Observed | None = None

    def lengths_seen(self) -> set[int]:
        return {s.length for s in self.length_objects if s.length is not None}


class Observer:
    """``on_op`` for a Recorder: follows token ids, positions and comparison masks through one forward.

    ``inputs`` maps the identity of each probe tensor to its role (``tokens``, ``target_tokens``);
    ``lengths`` are the probe's sequence lengths (source and target), which tell a score tensor from
    another (its last axis is a key length) and a length-sized object from a batch-sized one."""

    def __init__(self, model: nn.Module, inputs: dict[int, str], lengths: tuple[int, ...],
                 masks: dict[int, tuple[str, torch.Tensor]] | None = None, batch: int | None = None):
        self.observed = Observed()
        self.sides = frozenset(lengths) | ({batch} if batch is not None else set())
        self.masks = MaskFollower(masks or {}, frozenset(lengths))
        self.lengths = frozenset(lengths)
        self.tokens: dict[int, str] = dict(inputs)  # token ids and integer tensors derived from them -> role
        self.positions: dict[int, int] = {}  # integer tensors derived from arange / a buffer -> the length
        self.compared: dict[int, Sighting] = {}  # masks derived from a comparison of token ids with an id
        self.owned = {id(t): n for n, t in [*model.named_parameters(), *model.named_buffers()]}
        self.owned_tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}
        self.alive: list[torch.Tensor] = []
        self.reached: set[tuple[str | None, int | None]] = set()

    def finish(self, recording: Recording) -> Observed:
        self.observed.called = frozenset(c.path for c in recording.calls if not c.raised)
        self.observed.returned = next((c.outputs for c in recording.calls if c.path == "" and not c.raised), None)
        self.observed.caller_mask_uses = list(self.masks.uses)
        self.alive, self.masks.alive = [], []
        return self.observed

    def on_op(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        if not event.model_forward:
            return
        try:
            self.observe(event, args, kwargs, out)
        except Exception:  # noqa: BLE001 - an op the rules cannot read says nothing; the forward goes on
            return

    # ----- one op ----------------------------------------------------------------------------------
    def observe(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        name = event.short_name
        where = f"{short_path(event.file)}:{event.line}" if event.file else (event.module or "model")
        inputs = tensors_in((args, kwargs))
        outs = tensors_in(out)
        self.follow_tokens(name, args, inputs, outs, where)
        self.token_table(name, args, kwargs, inputs, where)
        self.follow_positions(name, args, kwargs, inputs, outs, where)
        self.follow_comparisons(name, args, kwargs, inputs, outs, where)
        self.masks.on_op(name, args, kwargs, inputs, outs, where)
        self.attention_length(name, args, inputs)
        side = self.square_side(inputs[0]) if name in TRIANGLES and inputs else None
        # A look-ahead mask is a triangle the forward makes for the sequence it got: a square of a probe length
        # (or of the batch size, in a (length, batch) model fed batch first), never a weight made triangular.
        if side is not None and side in self.sides and id(inputs[0]) not in self.owned:
            self.sight(self.observed.causal_masks, f"{name} on a ({side}, {side}) square", where, side, side)
            self.observed.length_objects.append(Sighting(f"{name} on a ({side}, {side}) square", where, side, side))
        if name in ATTENTIONS and kwargs.get("is_causal") is True:
            self.sight(self.observed.causal_masks, f"{name}(is_causal=True)", where)
        if name == "__getitem__" and len(args) >= 2 and id(args[0]) in self.owned:
            self.sliced(args[0], args[1], where)

    def attention_length(self, name: str, args: tuple, inputs: list) -> None:
        """The key axis attention runs over: which axis of the input the model reads as the length."""
        if name == "scaled_dot_product_attention" and len(inputs) >= 2 and inputs[1].dim() >= 2:
            self.observed.attention_lengths.add(int(inputs[1].shape[-2]))
        elif name == "multi_head_attention_forward" and len(inputs) >= 2 and inputs[1].dim() >= 2:
            self.observed.attention_lengths.add(int(inputs[1].shape[0]))  # torch's (length, batch, d) here
        elif name in SOFTMAXES and inputs and inputs[0].is_floating_point() and inputs[0].dim() >= 3:
            self.observed.attention_lengths.add(int(inputs[0].shape[-1]))

    def token_table(self, name: str, args: tuple, kwargs: dict, inputs: list, where: str) -> None:
        """An embedding table indexed by token ids of one side: how many ids that side's tokens may take."""
        if name != "embedding" or not inputs or id(inputs[0]) not in self.tokens:
            return
        weight = args[1] if len(args) > 1 else kwargs.get("weight")
        if isinstance(weight, torch.Tensor) and weight.dim() == 2:
            role = self.tokens[id(inputs[0])]
            table = self.owned.get(id(weight), "an embedding")
            found = Sighting(f"embedding '{table}' of {weight.shape[0]} rows", where, int(weight.shape[0]), role=role)
            if found not in self.observed.token_tables:
                self.observed.token_tables.append(found)

    def follow_tokens(self, name: str, args: tuple, inputs: list, outs: list, where: str) -> None:
        roles = [self.tokens[id(t)] for t in inputs if id(t) in self.tokens]
        if not roles or name in COMPARISONS:
            return
        for o in outs:  # a view, a slice, a transpose of the ids is still the ids
            if not o.is_floating_point() and o.dtype != torch.bool:
                self.keep(o)
                self.tokens[id(o)] = roles[0]

    def follow_positions(self, name: str, args: tuple, kwargs: dict, inputs: list, outs: list, where: str) -> None:
        if name == "arange" or (name == "cumsum" and self.counts_along_length(args, kwargs, inputs)):
            for o in outs:  # a cumsum of ones along the sequence (a mask's) numbers the positions as well
                self.keep(o)
                self.positions[id(o)] = o.numel() if name == "arange" else int(inputs[0].shape[self.dim(args, kwargs)])
            return
        if name == "embedding" and inputs and id(inputs[0]) in self.positions:
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            index = inputs[0]
            constant = index.numel() > 1 and bool((index == index.flatten()[0]).all())  # a type id made like them
            if isinstance(weight, torch.Tensor) and not constant:
                n = self.positions[id(inputs[0])]
                table = self.owned.get(id(weight), "an embedding")
                # positions read from an offset (a padding_idx, a stream read one ahead) leave fewer rows for them
                offset = max(0, int(inputs[0].max()) + 1 - n) if inputs[0].numel() else 0
                also = f", up to row {int(inputs[0].max())} for {n} positions" if offset else ""
                sighting = Sighting(f"embedding '{table}' of {weight.shape[0]} rows indexed by positions{also}",
                                    where, int(weight.shape[0]) - offset, n)
                # A (query, key) index is relative positions (T5's buckets): its table holds distances, not
                # positions, and caps no length.
                if sum(1 for size in inputs[0].shape if size in self.lengths) <= 1:
                    self.observed.position_tables.append(sighting)
                self.observed.length_objects.append(sighting)
            return
        known = [self.positions[id(t)] for t in inputs if id(t) in self.positions]
        if known and name not in COMPARISONS:
            for o in outs:
                if not o.is_floating_point() and o.dtype != torch.bool:
                    self.keep(o)
                    self.positions[id(o)] = known[0]

    def follow_comparisons(self, name: str, args: tuple, kwargs: dict, inputs: list, outs: list, where: str) -> None:
        if name in COMPARISONS and len(args) == 2 and id(args[0]) in self.tokens:
            value = args[1].item() if isinstance(args[1], torch.Tensor) and args[1].numel() == 1 else args[1]
            if isinstance(value, int) and not isinstance(value, bool):
                found = Sighting(f"{self.tokens[id(args[0])]} {'==' if 'eq' in name else '!='} {value}", where,
                                 value, role=self.tokens[id(args[0])])
                for o in outs:
                    self.keep(o)
                    self.compared[id(o)] = found
            return
        marked = [self.compared[id(t)] for t in inputs if id(t) in self.compared]
        if not marked:
            return
        if self.applies_to_scores(name, args, kwargs, inputs):
            for found in marked:
                if (found.role, found.size) not in self.reached:
                    self.reached.add((found.role, found.size))
                    self.observed.pad_comparisons.append(found)
            return
        if still_the_mask(name, all(id(t) in self.compared for t in inputs), outs):
            for o in outs:
                self.keep(o)
                self.compared[id(o)] = marked[0]

    def applies_to_scores(self, name: str, args: tuple, kwargs: dict, inputs: list) -> bool:
        """Whether this op puts a comparison mask on attention scores (a tensor whose last axis is a key
        length, with batch and query axes before it)."""
        if name in ATTENTIONS:
            return True
        scores = any(is_scores(t, self.lengths) for t in inputs if id(t) not in self.compared)
        if name in MASK_APPLIERS:
            index = MASK_APPLIERS[name]
            return index < len(args) and id(args[index]) in self.compared and scores
        return name in SCORE_ADDS and scores

    def sliced(self, table: torch.Tensor, index: Any, where: str) -> None:
        """A parameter or buffer cut to a probe length: a position table, a cached mask (its capacity)."""
        parts = index if isinstance(index, tuple) else (index,)
        if any(p is Ellipsis or p is None for p in parts):
            return
        name = self.owned[id(table)]
        cut = [(d, p.stop) for d, p in enumerate(parts)
               if isinstance(p, slice) and p.start in (None, 0) and isinstance(p.stop, int) and p.step in (None, 1)]
        for dim, stop in cut:
            if stop >= table.shape[dim]:
                continue
            sighting = Sighting(f"'{name}' of {table.shape[dim]} rows cut to {stop}", where, int(table.shape[dim]),
                                stop)
            self.observed.length_objects.append(sighting)
            self.observed.position_tables.append(sighting)
        dims = {d for d, _ in cut}
        if {table.dim() - 2, table.dim() - 1} <= dims and self.triangular(table):
            side = table.shape[-1]
            self.sight(self.observed.causal_masks, f"triangular buffer '{name}' ({side} × {side}) sliced", where)

    # ----- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def dim(args: tuple, kwargs: dict) -> int:
        return int(kwargs.get("dim", args[1] if len(args) > 1 else 0))

    def counts_along_length(self, args: tuple, kwargs: dict, inputs: list) -> bool:
        """A cumsum of an integer or bool tensor holding only ones, along an axis of a probe length."""
        if not inputs or inputs[0].is_floating_point() or inputs[0].dim() == 0:
            return False
        x = inputs[0]
        return int(x.shape[self.dim(args, kwargs)]) in self.lengths and bool((x == 1).all())

    def sight(self, into: list[Sighting], what: str, where: str, size: int | None = None,
              length: int | None = None) -> None:
        if not any(s.what == what and s.where == where for s in into):
            into.append(Sighting(what, where, size, length))

    def keep(self, tensor: torch.Tensor) -> None:
        self.alive.append(tensor)

    @staticmethod
    def square_side(t: torch.Tensor) -> int | None:
        return int(t.shape[-1]) if t.dim() >= 2 and t.shape[-1] == t.shape[-2] and t.shape[-1] > 1 else None

    @staticmethod
    def triangular(t: torch.Tensor) -> bool:
        """A lower-triangular keep pattern (ones on and below the diagonal) or an upper -inf / True one."""
        if t.dim() < 2 or t.shape[-1] != t.shape[-2] or t.shape[-1] < 2:
            return False
        first = t.reshape(-1, t.shape[-2], t.shape[-1])[0]
        if first.is_meta:
            return False
        ones = torch.ones(first.shape, dtype=torch.bool, device=first.device)
        nonzero = first != 0
        return bool((nonzero == ones.tril()).all() or (nonzero == ones.triu(1)).all())
