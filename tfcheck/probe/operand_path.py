"""The recorded ops between a projection and the attention operand made from it.

attention.scale matches an operand to its projection by per-head vector norms, which holds when only re-views,
rotations and one scalar lie between them. Some designs put other ops there: a bias added after the head split
and the scale divided into the query before the product (DeBERTa's ``query / scale``), or a normalisation of
each head's query and key (qk-norm). This module walks the recorded op graph back from the operand's tensor
to the nearest projection output and says what it found: the product of the known scalings on the way (None
where an op of unknown effect lies on it) and the normalising ops on the way (whose learned gain sets the
temperature, so a scale of 1 is a design there).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from tfcheck.recording.recorder import OpEvent, Recording

#: Ops that move or copy values without changing them.
RELAYOUTS = frozenset({
    "view", "reshape", "permute", "transpose", "contiguous", "chunk", "split", "unbind", "__getitem__", "unflatten",
    "flatten", "to", "float", "half", "bfloat16", "type", "type_as", "expand", "expand_as", "repeat",
    "repeat_interleave", "unsqueeze", "squeeze", "movedim", "swapaxes", "clone", "narrow", "select", "cat", "t",
})
MULTIPLIES = frozenset({"mul", "__mul__", "__rmul__", "mul_", "__imul__"})
DIVIDES = frozenset({"div", "__truediv__", "true_divide", "div_", "__itruediv__"})
ADDS = frozenset({"add", "__add__", "__radd__", "__iadd__", "add_"})
#: Ops that normalise a vector (a norm layer, or the rsqrt / x ** -0.5 of a hand-written RMSNorm).
NORMALISING = frozenset({"rsqrt", "rms_norm", "layer_norm", "normalize", "group_norm"})
#: How many ops the walk through ops of unknown effect visits, so a strange graph cannot make it slow. The ops are
#: counted along the operand's ancestry, not along the recording: a key reused from an earlier layer (Gemma 3n's
#: shared key-value layers) was made hundreds of ops before the product that reads it.
REACH = 400


@dataclass(frozen=True)
class OperandPath:
    """What lies between an operand and the projection it was made from."""

    projection: OpEvent | None  # the projection the walk reached (None: none reached)
    factor: float | None  # operand = factor · (re-laid-out projection output + bias); None: unknown ops between
    norms: tuple[OpEvent, ...]  # normalising ops between the projection and the operand
    #: The products and quotients by a number on the way (``q = q * 0.125``), whose statements attention.scale
    #: reads for a constant written in the source; only where the factor is known.
    scalings: tuple[OpEvent, ...] = ()


def operand_ids(score_op: OpEvent) -> tuple[int | None, int | None]:
    """The tensor identities of the query and key operands of a score product or sdpa call."""
    ids = score_op.input_ids
    name = score_op.short_name
    if name == "baddbmm":
        ids = ids[-2:]
    elif name == "__rmatmul__":
        ids = ids[1::-1]
    return (ids[0], ids[1]) if len(ids) >= 2 else (None, None)


def path_to_projection(recording: Recording, tensor_id: int | None, before: int, projections: dict[int, OpEvent],
                       scalar_values: dict[int, float]) -> OperandPath:
    """Walk back from ``tensor_id`` (made before op ``before``) to the nearest of ``projections`` (output tensor id
    -> projection op). ``scalar_values`` holds the values of the one-element tensors the ops read."""
    producers = _producers(recording, before)
    factor: float | None = 1.0
    current = tensor_id
    scalings: list[OpEvent] = []
    for _ in range(64):
        if current is None:
            break
        if current in projections:
            return OperandPath(projections[current], factor, _norms_between(producers, tensor_id, current),
                               tuple(scalings) if factor is not None else ())
        op = producers.get(current)
        if op is None:
            break
        step, current = _step(op, producers, scalar_values)
        factor = None if factor is None or step is None else factor * step
        if step is not None and op.short_name in MULTIPLIES | DIVIDES:
            scalings.append(op)
    reached = _reached_projection(producers, tensor_id, projections)
    if reached is None:
        return OperandPath(None, None, ())
    return OperandPath(projections[reached], None, _norms_between(producers, tensor_id, reached))


#: The last recording indexed and its index (every site of one recording walks the same graph).
_INDEXED: list[tuple[weakref.ref, int, dict[int, OpEvent]]] = []


def _producers(recording: Recording, before: int) -> dict[int, OpEvent]:
    """Tensor id -> the op that made it, over the whole recording: the recorder keeps every tensor alive while it
    records, so an id names one tensor and the producers of a tensor made before op ``before`` come before it."""
    for ref, length, made in _INDEXED:
        if ref() is recording and length == len(recording.ops):
            return made
    made = {}
    for op in recording.ops:
        if op.model_forward:
            for out in op.output_ids:
                if out not in op.input_ids:  # an in-place op or a no-op .to() keeps its producer
                    made.setdefault(out, op)  # one id, one tensor: its maker is the first op that returned it
    _INDEXED[:] = [(weakref.ref(recording), len(recording.ops), made)]
    return made


def _step(op: OpEvent, producers: dict[int, OpEvent], scalar_values: dict[int, float]):
    """(the factor the op applies, the tensor it was applied to); (None, that tensor) where the factor is unknown."""
    name = op.short_name
    if name in RELAYOUTS:
        carried = [i for i in op.input_ids if i in producers or i not in scalar_values]
        return 1.0, carried[-1] if name == "cat" and carried else (carried[0] if carried else None)
    numbers = [float(v) for v in op.scalars.get("positional", {}).values() if isinstance(v, (int, float))]
    numbers += [scalar_values[i] for i in op.input_ids if i in scalar_values]
    activations = [i for i in op.input_ids if i not in scalar_values]
    if name in MULTIPLIES | DIVIDES and len(activations) == 1 and len(numbers) == 1 and numbers[0] != 0:
        return (numbers[0] if name in MULTIPLIES else 1 / numbers[0]), activations[0]
    if name in ADDS and len(activations) == 2 and not numbers:
        # operand = x + bias, the bias broadcast (fewer elements): a shift, no scaling
        first, second = (_elements(op, i) for i in activations)
        if first is not None and second is not None and first != second:
            return 1.0, activations[0] if first > second else activations[1]
    return None, activations[0] if activations else None


def _elements(op: OpEvent, tensor_id: int) -> int | None:
    for meta, i in zip(op.inputs, op.input_ids):
        if i == tensor_id:
            shape = getattr(meta, "shape", None)
            return None if shape is None else _product(shape)
    return None


def _product(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _ancestors(producers: dict[int, OpEvent], tensor_id: int | None, stop: set[int]) -> list[OpEvent]:
    seen: dict[int, OpEvent] = {}
    frontier = [tensor_id]
    while frontier and len(seen) < REACH:
        current = frontier.pop()
        if current is None or current in stop:
            continue
        op = producers.get(current)
        if op is None or op.index in seen:
            continue
        seen[op.index] = op
        frontier.extend(op.input_ids)
    return sorted(seen.values(), key=lambda o: o.index)


def _reached_projection(producers: dict[int, OpEvent], tensor_id: int | None,
                        projections: dict[int, OpEvent]) -> int | None:
    """The latest projection output among the tensor's ancestors (the walk through ops of unknown effect)."""
    ancestors = _ancestors(producers, tensor_id, set(projections))
    reached = [i for op in ancestors for i in op.input_ids if i in projections]
    if tensor_id in projections:
        reached.append(tensor_id)
    return max(reached, key=lambda i: projections[i].index) if reached else None


def _norms_between(producers: dict[int, OpEvent], tensor_id: int | None, projection_out: int) -> tuple[OpEvent, ...]:
    ops = _ancestors(producers, tensor_id, {projection_out})
    return tuple(op for op in ops if op.short_name in NORMALISING or _inverse_root(op))


def _inverse_root(op: OpEvent) -> bool:
    """x ** -0.5, as a hand-written RMSNorm computes 1/√mean(x²)."""
    exponent = op.scalars.get("positional", {}).get(1)
    return op.short_name in {"pow", "__pow__"} and isinstance(exponent, (int, float)) and exponent == -0.5


#: Ops that pick elements by an index tensor, and the ops that rank values into indices: a gather whose indices
#: were ranked from activations groups tokens by content (routing or clustering attention).
GATHERS = frozenset({"gather", "index_select", "take_along_dim", "take", "__getitem__", "index"})
RANKINGS = frozenset({"topk", "argmax", "argmin", "argsort", "sort", "max", "min", "kthvalue", "multinomial"})


def routed_by_content(recording: Recording, tensor_id: int | None, before: int, projections: set[int],
                      within: set[int]) -> OpEvent | None:
    """The gather on the way from ``tensor_id`` back to its projection (the walk stops at ``projections``' outputs
    and at ops outside the module calls ``within``: the attention's own block, so a mixture of experts' routing in an
    earlier layer is no part of it) that picks elements by indices ranked from activations (a top-k or k-means
    routing), or None: an operand made so holds tokens in the routing's order, not the sequence's. Indices counted
    from positions (an arange, a window) are no routing."""
    producers = _producers(recording, before)
    local = {i: op for i, op in producers.items() if op.call in within}
    for op in _ancestors(local, tensor_id, projections):
        if op.short_name in GATHERS and any(
                _ranked(producers, i) for meta, i in zip(op.inputs, op.input_ids) if _integral(meta)):
            return op
    return None


def _ranked(producers: dict[int, OpEvent], index_id: int) -> bool:
    """Whether an integer tensor was computed, through integer ops only, from a ranking of values."""
    frontier, seen = [index_id], set[int]()
    while frontier and len(seen) < REACH:
        op = producers.get(frontier.pop())
        if op is None or op.index in seen:
            continue
        seen.add(op.index)
        if op.short_name in RANKINGS:
            return True
        frontier.extend(i for meta, i in zip(op.inputs, op.input_ids) if _integral(meta))
    return False


def _integral(meta) -> bool:
    return str(getattr(meta, "dtype", "")).startswith(("int", "uint", "torch.int", "torch.uint"))
