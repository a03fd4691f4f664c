"""A pooled output: forward returns one vector per sample, (batch, C), because the model's own code reduced the
length axis on the way (one position taken, ``x[:, 0]`` for a [CLS] token or ``x[:, -1]``; a mean, sum or max
over the positions; attention weights over them), as a sequence classifier or a sentence encoder does by design.

Read off the shared recorded forward of the standard probe, never off the output's shape alone (a length axis
lost by a bug has the same shape): the ops that made the output are followed back through per-sample tensors
without a length axis until an op's input has one. Such an op pools when it leaves at most one position's worth of
values per sample; one that leaves more (a reshape folding the positions into the features) loses the length
axis without pooling, and no op at all (the output made from no positioned tensor) says nothing.
"""
from __future__ import annotations

import linecache
import math
from dataclasses import dataclass

from tfcheck.frames import short_path
from tfcheck.model.inputs import PROBE_BATCH
from tfcheck.probe import recorded_probe
from tfcheck.recording.recorder import OpEvent, Recording
from tfcheck.recording.tensor_meta import TensorMeta

#: What an op that removes the length axis does, by its short name (any other name: "reduces the positions").
TAKES_ONE = frozenset({"__getitem__", "select", "index_select", "gather", "narrow", "take_along_dim"})
REDUCES = frozenset({"mean", "sum", "nansum", "nanmean", "amax", "max", "amin", "min", "logsumexp", "median",
                     "norm", "prod"})
WEIGHS = frozenset({"matmul", "bmm", "einsum", "__matmul__", "baddbmm", "scaled_dot_product_attention"})


@dataclass(frozen=True)
class Transition:
    """One op whose input is laid out per position and whose output, per sample, has no length axis."""

    op: str
    module: str
    file: str | None
    line: int | None
    source: tuple[int, ...]  # the positioned input's shape
    result: tuple[int, ...]  # the op's output shape

    @property
    def how(self) -> str:
        if self.op in TAKES_ONE:
            return f"one position taken per sample ({self.op})"
        if self.op in REDUCES:
            return f"a reduction over the positions ({self.op})"
        if self.op in WEIGHS:
            return f"the positions weighed ({self.op})"
        return f"the positions reduced ({self.op})"

    @property
    def where(self) -> str:
        return f"{short_path(self.file)}:{self.line}" if self.file else f"module '{self.module or '<root>'}'"

    def code(self) -> str:
        """The source line of the op, stripped ('' where it cannot be read)."""
        return linecache.getline(self.file, self.line).strip() if self.file and self.line else ""

    def describe(self) -> str:
        """'bert.py:104 (`h[:, 0]`: one position taken per sample (__getitem__), (3, 7, 32) -> (3, 32))'."""
        code = self.code()
        return f"{self.where} ({f'`{code}`: ' if code else ''}{self.how}, {self.source} -> {self.result})"

    def evidence(self) -> dict:
        return {"op": self.op, "how": self.how, "module": self.module, "file": short_path(self.file) if self.file
                else None, "line": self.line, "code": self.code(), "from_shape": self.source, "to_shape": self.result}


@dataclass(frozen=True)
class LengthAxis:
    """How the length axis left the output of one recorded forward: the ops that pooled it and those that folded it
    into another axis."""

    width: int  # the output's C, at the standard probe
    pooled_by: tuple[Transition, ...]
    folded_by: tuple[Transition, ...]

    @property
    def pooled(self) -> bool:
        """Pooled by design: some op pools the positions and none folds them away."""
        return bool(self.pooled_by) and not self.folded_by

    @property
    def main(self) -> Transition:
        """The pooling op that leaves the most values per sample, the nearest the output of those (a masked mean's
        sum of the states rather than its count of the real tokens)."""
        return max(self.pooled_by, key=lambda t: math.prod(t.result))

    def evidence(self) -> dict:
        return {"width": self.width, "pooled_by": [t.evidence() for t in self.pooled_by],
                "measured_on": f"the shared recorded forward at batch {PROBE_BATCH}"}


def length_axis(ctx) -> LengthAxis | None:
    """How the standard probe's output lost its length axis, read off the shared recorded forward; None when that
    output is not (batch, C) (it keeps a length axis, or has another layout)."""
    shared = recorded_probe.shared(ctx)
    out = shared.probe.output
    if out.dim() != 2 or out.shape[0] != PROBE_BATCH:
        return None
    return read(shared.recording, tuple(out.shape), PROBE_BATCH, shared.probe.length)


def read(recording: Recording, output_shape: tuple[int, ...], batch: int, length: int) -> LengthAxis | None:
    """The ops between the positioned tensors of one recorded forward and its (batch, C) output of
    ``output_shape``; None when the output is not recorded as made by an op."""
    ops = [o for o in recording.ops if o.model_forward]
    made: dict[int, list[int]] = {}  # tensor id -> indices (in ``ops``) of the ops that returned it
    for i, op in enumerate(ops):
        for t in op.output_ids:
            made.setdefault(t, []).append(i)
    root = next((c for c in recording.calls if c.parent is None), None)
    starts = [t for t in (root.output_ids if root is not None else ())
              if any(_meta_of(ops[i], t).shape == output_shape for i in made.get(t, ()))]
    if not starts:
        return None
    work, seen = [(t, len(ops)) for t in starts], set()
    pooled: dict[int, Transition] = {}
    folded: dict[int, Transition] = {}
    while work:
        tensor, before = work.pop()
        maker = next((i for i in reversed(made.get(tensor, ())) if i < before), None)
        if maker is None or (tensor, maker) in seen:
            continue  # a model input, a parameter, or a path already followed
        seen.add((tensor, maker))
        op = ops[maker]
        positioned = [m for m, t in zip(op.inputs, op.input_ids) if t != tensor and _positioned(m, batch, length)]
        if positioned:
            result = _meta_of(op, tensor)
            if _positioned(result, batch, length):
                continue  # the positions are kept (a mean over the features): no op here removes the length axis
            widest = max(positioned, key=lambda m: math.prod(m.shape) // (batch * length))
            step = Transition(op.short_name, op.module, op.file, op.line, widest.shape, result.shape)
            pools = math.prod(step.result) // batch <= math.prod(widest.shape) // (batch * length)
            (pooled if pools else folded)[maker] = step
            continue
        work += [(t, maker) for m, t in zip(op.inputs, op.input_ids) if t == tensor or _per_sample(m, batch)]
    order = sorted(pooled, reverse=True)
    return LengthAxis(output_shape[1], tuple(pooled[i] for i in order),
                      tuple(folded[i] for i in sorted(folded, reverse=True)))


def _meta_of(op: OpEvent, tensor: int) -> TensorMeta:
    return next((m for m, t in zip(op.outputs, op.output_ids) if t == tensor), op.outputs[0])


def _batch_axis(meta: TensorMeta, batch: int) -> int | None:
    shape = meta.shape
    if shape and shape[0] == batch:
        return 0
    return 1 if len(shape) > 1 and shape[1] == batch else None


def _per_sample(meta: TensorMeta, batch: int) -> bool:
    """A tensor with one row per sample (not a weight or a constant shared by all samples)."""
    return _batch_axis(meta, batch) is not None


def _positioned(meta: TensorMeta, batch: int, length: int) -> bool:
    """A per-sample tensor with an axis of the sequence's length besides its batch axis ((b, s, d), (s, b, d),
    (b, d, s) after a transpose, (b, s) ids or masks)."""
    axis = _batch_axis(meta, batch)
    return axis is not None and any(n == length for i, n in enumerate(meta.shape) if i != axis)
