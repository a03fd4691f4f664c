"""The op that merged an attention's heads back: the reshape (``view``, ``reshape``, ``flatten``) on the way from
the value product's output to the output projection's input, found by walking the recorded ops back.

Where the heads are merged in the wrong order, the projection only consumes the mixed tensor: the line to change is
the reshape that folded (b, h, s, d_k) into (b, s, h·d_k) without moving the heads next to the features, often a
line or a helper away from the projection. The walk needs the recorder's tensor identities (``track_ids``).
"""
from __future__ import annotations

from tfcheck.recording.recorder import OpEvent, Recording

#: Ops that fold axes together: a heads merge is one of these.
FOLDS = frozenset({"view", "reshape", "flatten", "view_as", "reshape_as", "rearrange"})
#: Ops that may lie between the value product and the projection without being the merge: they copy, cast or
#: re-lay out values (a dropout is the identity in eval mode). Any other op ends the walk: the projection's
#: input is then not the heads' output re-laid out, and no reshape can be named with confidence.
PASSES = frozenset({"contiguous", "clone", "to", "float", "half", "bfloat16", "type", "type_as", "dropout",
                    "transpose", "permute", "movedim", "swapaxes", "unsqueeze", "squeeze", "mT"})
#: How many ops the walk visits at most (a merge is a few ops from the projection).
REACH = 32


def merging_op(recording: Recording, value_op: OpEvent, projection: OpEvent) -> OpEvent | None:
    """The first fold after the value product on the chain of re-layouts leading to the projection's input (the
    fold nearest the heads' layout: a later ``view(b * s, d)`` for a 2-D matmul only flattens what it made), or
    None where the chain leaves re-layouts, never reaches the value product's output, holds no fold, or the fold's
    line lies in an installed package the projection's line does not (einops' insides, not the model's call)."""
    made = _producers(recording, value_op.index, projection.index)
    targets = set(value_op.output_ids)
    for start in projection.input_ids:  # the activation; a parameter has no producer and ends its walk at once
        fold = _fold_on_chain(made, start, targets)
        if fold is not None:
            return None if _installed(fold.file) and not _installed(projection.file) else fold
    return None


def _producers(recording: Recording, after: int, before: int) -> dict[int, OpEvent]:
    """Tensor id -> the model's op that made it, between the value product and the projection."""
    made: dict[int, OpEvent] = {}
    for op in recording.ops[after + 1:before]:
        if op.model_forward:
            for out in op.output_ids:
                if out not in op.input_ids:  # an in-place op or a no-op .to() keeps its producer
                    made.setdefault(out, op)
    return made


def _fold_on_chain(made: dict[int, OpEvent], start: int, targets: set[int]) -> OpEvent | None:
    current, fold = start, None
    for _ in range(REACH):
        if current in targets:
            return fold
        op = made.get(current)
        if op is None or not op.input_ids or op.short_name not in FOLDS | PASSES:
            return None
        if op.short_name in FOLDS and _folds(op):
            fold = op  # walking back: the last one seen is the first executed
        current = op.input_ids[0]
    return None


def _folds(op: OpEvent) -> bool:
    """The op's output has fewer axes than its input (a merge, not a split)."""
    return bool(op.inputs and op.outputs) and len(op.outputs[0].shape) < len(op.inputs[0].shape)


def _installed(file: str | None) -> bool:
    return bool(file) and "site-packages" in str(file)
