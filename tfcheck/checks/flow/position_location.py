"""Where position.sensitivity's failures are to be fixed, read off the shared recorded forward (batch and length
distinct), never off module or class names: the op that reads a table of the model by the batch axis; the op that
reads a table of the model long enough for every position but leaves no axis of the length (``pe[x.size(1)]``, one
row for all); or the place the positional encoding is missing from (a module that computes nothing where it
belongs, else the first use of the embedded tokens)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tfcheck.checks.shape.shape_residual import Dataflow
from tfcheck.probe import recorded_probe
from tfcheck.probe.attention_sites import SOFTMAXES
from tfcheck.recording.recorder import OpEvent, Recording
from tfcheck.report.findings import Location

#: Ops that read rows of a table.
_ROW_READS = frozenset({"__getitem__", "narrow", "index_select", "embedding", "take", "gather"})
_ATTENTION = frozenset({*SOFTMAXES, "scaled_dot_product_attention", "multi_head_attention_forward"})


def _recorded(ctx) -> tuple[Recording, int, int]:
    recorded = recorded_probe.shared(ctx)
    return recorded.recording, recorded.probe.batch, recorded.probe.length


def table_indexed_by_batch(ctx) -> Location:
    """The op that read rows of one of the model's tables (a parameter or buffer) as many as the batch has
    samples and none per position: pe[:x.size(0)], pos_emb(arange(x.size(0)))."""
    recording, batch, length = _recorded(ctx)
    model = ctx.subject.model
    owned = {id(t) for t in (*model.parameters(), *model.buffers())}
    for op in recording.ops:
        if op.level != "function" or op.phase != "forward" or op.short_name not in _ROW_READS or \
                not owned & set(op.input_ids) or not op.outputs:
            continue
        shape = op.outputs[0].shape
        if batch != length and shape and shape[0] == batch and length not in shape[1:] and op.file:
            return Location(op.module, op.file, op.line)
    return Location(module="", reason="the recorded forward shows no read of a table of the model sized by the "
                    "batch; the dependence on the batch index is measured on the whole output")


@dataclass(frozen=True)
class TableRead:
    """A read of a table of the model, with room for every position, that leaves no axis of the sequence's length:
    the positions were meant to come from it and none do."""

    table: str
    rows: int
    result: tuple[int, ...]
    location: Location

    def describe(self) -> str:
        return (f"the table '{self.table}' ({self.rows} rows) is read at {self.location.file}:{self.location.line} "
                f"into shape {self.result}, which has no axis of the sequence's length: every position gets the "
                "same rows. Read one row per position (pe[:length], pos_emb(arange(length)))")


def table_read_without_positions(ctx) -> TableRead | None:
    """The first read, before the first attention and reaching it, of a table of the model (a parameter, a buffer or
    a plain tensor attribute, as tutorials keep a sinusoid) of at least as many rows as the sequence has positions,
    whose result has neither a batch nor a length axis: no token lookup (per sample, per position) is such a read,
    and a position table read so gives every position the same rows."""
    recording, batch, length = _recorded(ctx)
    if batch == length:
        return None
    tables = _tables(ctx.subject.model)
    graph = Dataflow(recording)
    stop = next((op for op in graph.ops if op.phase == "forward" and op.short_name in _ATTENTION), None)
    if stop is None:
        return None
    for op in graph.ops:
        if op.index >= stop.index:
            break
        table = next((tables[t] for t in op.input_ids if t in tables), None)
        if op.phase != "forward" or op.short_name not in _ROW_READS or table is None or not op.outputs \
                or not op.file or not op.outputs[0].dtype.startswith(("float", "bfloat")):
            continue
        name, shape = table
        result = op.outputs[0].shape
        if len(shape) < 2 or max(shape[:-1]) < length or length in result or (result and result[0] == batch):
            continue
        if any(graph.depends(t, set(op.output_ids)) for t in stop.input_ids):
            return TableRead(name, max(shape[:-1]), result, Location(op.module, op.file, op.line))
    return None


def _tables(model) -> dict[int, tuple[str, tuple[int, ...]]]:
    """id -> (name, shape) of the model's parameters, buffers and tensors kept as plain attributes."""
    found = {id(t): (n, tuple(t.shape)) for n, t in (*model.named_parameters(), *model.named_buffers())}
    for path, module in model.named_modules():
        for attr, value in vars(module).items():
            if isinstance(value, torch.Tensor) and id(value) not in found:
                found[id(value)] = (f"{path}.{attr}" if path else attr, tuple(value.shape))
    return found


def unplaced_positions(ctx) -> Location:
    """Where positions were left out: a module on the token embeddings' way to the first attention that computes
    nothing (an nn.Identity standing where the positional encoding was meant): the line that built it; else the
    first use of the embedded tokens outside the embedding, where the table would be added."""
    recording, batch, length = _recorded(ctx)
    graph = Dataflow(recording)
    lookup = next((op for op in graph.ops if op.short_name == "embedding" and op.phase == "forward"
                   and any(m.shape[:2] == (batch, length) and not m.dtype.startswith(("float", "bfloat"))
                           for m in op.inputs)), None)
    if lookup is None:
        return Location(module="", reason="no embedding lookup of the tokens in the recorded forward: tfcheck "
                        "cannot tell where a positional encoding would go")
    stop = next((op.index for op in graph.ops if op.index > lookup.index and op.short_name in _ATTENTION),
                len(recording.ops))
    for call in recording.calls:
        if lookup.index < call.first_op <= stop and call.last_op < call.first_op and call.input_ids \
                and set(call.output_ids) <= set(call.input_ids) and call.output_ids \
                and graph.depends(call.input_ids[0], set(lookup.output_ids)):
            built = ctx.subject.construction_site(call.path, call.path)
            if built.line:
                return built
    used = _first_use_outside(graph, recording, lookup, stop)
    if used is None or not used.file:
        return Location(module=lookup.module, reason="the tokens' embedding reaches the attention through no op of "
                        "the user's code; add the positions where the embedding is returned")
    return Location(used.module, used.file, used.line, reason="no positional encoding is in the model to point at: "
                    "this is where the embedded tokens are used, where the positions would be added")


def _first_use_outside(graph: Dataflow, recording: Recording, lookup: OpEvent, stop: int) -> OpEvent | None:
    """The first op, before the first attention, that takes the embedded tokens outside the module that
    embedded them (the outermost module around the lookup that ends before the attention)."""
    calls = [c for c in recording.calls if c.parent is not None and c.first_op <= lookup.index <= c.last_op < stop]
    if not calls:
        return None
    embedding = min(calls, key=lambda c: c.depth)
    return graph.first_use(embedding)
