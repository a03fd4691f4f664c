"""Where the values computed from some parameters go in one recorded forward (tensor identities kept): into
the outputs the loss reads as values (with their graph or cut from it), only as the integer indices of a
selection (topk, argsort, argmax), only through tensors with no elements, or nowhere, last held by what a module
returned to a caller that read the rest of it.

train.grad_flow asks this of a module that ran although its parameters get no gradient, to tell its bugs (the
output cut from the graph by .detach(), torch.no_grad or an op with no derivative, or dropped by the code that
computed it) from correct designs: a sub-model's return value its caller does not need (a base model's pooled
output under a masked-LM head), a selector whose scores are read only as indices (a sparse-attention indexer
trained by a loss of its own), and a module of whole windows given a sequence shorter than one.

Dependence is followed op by op: an op with a tensor computed from the parameters among its inputs makes
outputs computed from them (an in-place op makes its first argument so). A float output with elements carries
them as values; an integer or boolean output carries them as indices, as does anything later made from indices
and from no value; an output with no elements carries nothing. The rule over-approximates (``zeros_like(x)``
depends on ``x``): a tensor it wrongly counts as reaching the output as values keeps the finding a failure. One
over-approximation is undone, as it made a correct design look cut: a window (a slice, a split) of a concatenation
that holds none of its parts computed from the parameters (the padding mask packed beside an indexer's keys as one
more channel, and read back) is not computed from them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfcheck.probe.concat_windows import ConcatWindows
from tfcheck.recording.recorder import OpEvent, Recording, TensorMeta, tensors_in

#: Ops whose integer output is positions picked by the values of their input: the picked positions carry no
#: gradient back to the values that picked them.
INDEX_OPS = frozenset({"topk", "sort", "argsort", "argmax", "argmin", "max", "min", "kthvalue", "mode", "median",
                       "nanmedian", "cummax", "cummin", "searchsorted", "bucketize", "multinomial"})
#: Dtypes whose tensors carry values autograd can differentiate.
_VALUE_DTYPES = ("float", "bfloat", "half", "double", "complex")


@dataclass(frozen=True)
class OpSite:
    """One recorded op: what a reader calls it, the module it ran in and the model's line."""

    name: str
    module: str
    file: str | None
    line: int | None

    @classmethod
    def of(cls, op: OpEvent) -> OpSite:
        return cls(op.short_name, op.module, op.file, op.line)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else f"'{self.module or '<root>'}'"
        return f"{self.name} at {where}"


@dataclass
class GradWatch:
    """An ``on_op`` observer: which inputs and outputs of each op required grad when the op ran (a later
    ``requires_grad_()`` does not rewrite what an op gave)."""

    inputs: dict[int, tuple[bool, ...]] = field(default_factory=dict)
    outputs: dict[int, tuple[bool, ...]] = field(default_factory=dict)
    windows: ConcatWindows = field(default_factory=ConcatWindows)  # which part of a concatenation a slice took

    def on_op(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        if event.parent_op is None:  # the aten ops inside a Python-level call are summed up by it
            self.inputs[event.index] = tuple(t.requires_grad for t in tensors_in((args, kwargs)))
            self.outputs[event.index] = tuple(t.requires_grad for t in tensors_in(out))
            if event.phase == "forward":
                self.windows.on_op(event, args, kwargs, out)


@dataclass(frozen=True)
class Flow:
    """What became of the values computed from the parameters traced."""

    as_values: bool  # a float tensor with elements computed from them is among the outputs the loss reads
    selections: tuple[OpSite, ...]  # the ops whose integer outputs carried them into the loss's outputs
    cut: OpSite | None  # the first op that took them with a graph and gave them without one, on a path to the loss
    returned_by: int | None  # the outermost module call (not the model's) whose return value held them
    emptied: OpSite | None = None  # the op that gave them as a tensor with no elements (on a path to the loss first)

    @property
    def only_as_indices(self) -> bool:
        """They reach the loss only through the positions a selection picked: no gradient by construction."""
        return not self.as_values and bool(self.selections) and all(s.name in INDEX_OPS for s in self.selections)

    @property
    def only_as_empty(self) -> bool:
        """They reach the loss, if at all, only through a tensor with no elements, and were given as one: nothing
        is computed from them at this input's size (a module that works on whole windows of a sequence shorter
        than one window)."""
        return not self.as_values and not self.selections and self.emptied is not None


@dataclass
class _Traced:
    """The tensors computed from the traced values so far, by identity."""

    values: dict[int, frozenset[int]]  # with elements: the ops that cut the graph on the way
    indices: dict[int, frozenset[int]] = field(default_factory=dict)  # the ops that turned them into integers
    empty: dict[int, int] = field(default_factory=dict)  # the op that gave them with no elements

    def held(self) -> set[int]:
        return set(self.values) | set(self.indices) | set(self.empty)

    def holds(self, tensor: int) -> bool:
        return tensor in self.values or tensor in self.indices or tensor in self.empty


def trace(recording: Recording, watch: GradWatch, seeds: set[int], loss: set[int], module: str) -> Flow:
    """Follow the values computed from the tensors ``seeds`` (ids of parameters of ``module``) through the
    recorded forward to ``loss`` (ids of the output tensors the loss reads)."""
    traced = _Traced({i: frozenset() for i in seeds})
    windows = watch.windows.follower()
    for op in recording.ops:
        if op.parent_op is not None or op.phase != "forward" or op.raised:
            continue
        grad_in = watch.inputs.get(op.index, ())
        grad_out = watch.outputs.get(op.index) or (True,) * len(op.output_ids)  # unread: claim no cut
        outputs = [o for o, derived in zip(zip(op.output_ids, op.outputs, grad_out), windows.derived(op, traced.holds))
                   if derived]
        if _mutates_first_argument(op) and op.input_ids and op.input_ids[0] not in op.output_ids:
            # the watch read the written argument after the op: whether it requires grad now is what it gave
            outputs.append((op.input_ids[0], op.inputs[0], bool(grad_in[:1] and grad_in[0])))
        _step(op, grad_in, outputs, traced)
    reached = [traced.values[i] for i in loss if i in traced.values]
    picked = frozenset().union(*(traced.indices[i] for i in loss if i in traced.indices))
    # An empty tensor on the way to the loss names where they were emptied; else the first one made at all (a
    # window's slice that only a branch taken at longer inputs would read).
    emptied = sorted(traced.empty[i] for i in loss if i in traced.empty) or sorted(traced.empty.values())
    cuts = sorted(frozenset().union(*reached)) if reached else []
    ops = recording.ops
    return Flow(as_values=bool(reached), selections=tuple(OpSite.of(ops[i]) for i in sorted(picked)),
                cut=OpSite.of(ops[cuts[0]]) if cuts else None,
                returned_by=_returned_by(recording, module, traced.held(), loss),
                emptied=OpSite.of(ops[emptied[0]]) if emptied else None)


def _step(op: OpEvent, grad_in: tuple[bool, ...], outputs: list[tuple[int, TensorMeta, bool]],
          traced: _Traced) -> None:
    """Mark the outputs of one op computed from the traced values: as values, indices or empty tensors."""
    from_values = [(i, had_grad) for i, had_grad in zip(op.input_ids, grad_in + (False,) * len(op.input_ids))
                   if i in traced.values]
    from_indices = [traced.indices[i] for i in op.input_ids if i in traced.indices]
    from_empty = [traced.empty[i] for i in op.input_ids if i in traced.empty]
    if from_values:
        came = frozenset().union(*(traced.values[i] for i, _ in from_values))
        graded = any(had_grad for _, had_grad in from_values)
        for out, meta, has_grad in outputs:
            if 0 in meta.shape:
                traced.empty[out] = op.index
            elif _is_value(meta.dtype):
                traced.values[out] = came | ({op.index} if graded and not has_grad else frozenset())
            else:
                traced.indices[out] = frozenset({op.index})
    elif from_indices:
        picked = frozenset().union(*from_indices)
        for out, _, _ in outputs:
            if out not in traced.values:
                traced.indices[out] = picked
    elif from_empty:
        for out, _, _ in outputs:
            if out not in traced.values and out not in traced.indices:
                traced.empty[out] = min(from_empty)


def _is_value(dtype: str) -> bool:
    return dtype.removeprefix("nested ").startswith(_VALUE_DTYPES)


def _mutates_first_argument(op: OpEvent) -> bool:
    """``x.add_(y)``, ``x[i] = y``: the op writes its first argument, whatever it returns."""
    name = op.short_name
    return name == "__setitem__" or (name.endswith("_") and not name.startswith("_"))


def _returned_by(recording: Recording, module: str, derived: set[int], loss: set[int]) -> int | None:
    """The outermost call enclosing a call of ``module``, below the model's own, whose return value holds a tensor
    computed from the traced values while another tensor of it reaches the loss: the caller used that result,
    only not this part of it (a base model's pooled output beside the hidden states its head reads). A return
    value no part of which is read (an encoder's output the decoder ignores) is no such design."""
    enclosing: set[int] = set()
    for call in recording.calls:
        if call.path != module:
            continue
        parent = call.parent
        while parent is not None and recording.calls[parent].parent is not None:
            enclosing.add(parent)
            parent = recording.calls[parent].parent
    holders = [recording.calls[i] for i in sorted(enclosing) if derived.intersection(recording.calls[i].output_ids)]
    read = [c for c in holders if _reaches(recording, set(c.output_ids) - derived, loss, c.last_op + 1)]
    return min(read, key=lambda c: (c.depth, c.index)).index if read else None


def _reaches(recording: Recording, start: set[int], loss: set[int], after: int) -> bool:
    """Whether any of the tensors ``start`` is, or is used to compute, one of ``loss`` (ops from ``after`` on)."""
    live = set(start)
    for op in recording.ops[max(after, 0):]:
        if live & loss:
            return True
        if op.parent_op is None and op.phase == "forward" and live.intersection(op.input_ids):
            live.update(op.output_ids)
            if _mutates_first_argument(op) and op.input_ids:
                live.add(op.input_ids[0])
    return bool(live & loss)
