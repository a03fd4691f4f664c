"""An output a whole number of d_model-wide streams wide, for shape.contract.

A reversible residual network (RevNet, Reformer) carries two streams of d_model through its layers and returns
both side by side: its last states are 2 x d_model wide, normalised together at that width, by design. The same
width is what a bug gives (a head projecting to 2 x d_model, a tensor concatenated with itself), so the design is
told apart by what the recorded forward shows, never by the model's name:

- the module that made the output keeps the width of its input (its parameters, if any, are vectors of the
  output's width: a norm's scale and shift, not a projection's matrix);
- its input is the output of one concatenation along the last axis of k different d_model-wide tensors.
"""
from __future__ import annotations

import dataclasses

from tfcheck.frames import short_path
from tfcheck.recording.recorder import ModuleCall, OpEvent, Recording
from tfcheck.report.findings import Finding, Related
from tfcheck.report.status import Status

_CONCATENATIONS = ("cat", "concat", "concatenate")


@dataclasses.dataclass(frozen=True)
class Streams:
    """k streams of ``width`` each, concatenated by ``joined`` and taken at full width by the module ``call``."""

    k: int
    width: int
    call: ModuleCall
    joined: OpEvent


def concatenated_streams(subject, recording: Recording, out_width: int, expected: object) -> Streams | None:
    """The streams an output ``out_width`` wide is made of, where ``expected`` (the width the check wanted) is
    d_model and the recording shows the design (module docstring); None otherwise."""
    d_model = subject.facts.d_model
    if not isinstance(expected, int) or expected != d_model or out_width % d_model or out_width // d_model < 2:
        return None
    call = producer_call(recording)
    if call is None or not _keeps_width(subject, call.path, out_width):
        return None
    joined = next((o for o in reversed(recording.ops) if o.level == "function" and o.phase == "forward"
                   and set(o.output_ids) & set(call.input_ids) and _joins(o, d_model, out_width // d_model)), None)
    return None if joined is None else Streams(out_width // d_model, d_model, call, joined)


def producer_call(recording: Recording) -> ModuleCall | None:
    """The last module called (below the root) that returned the model's output tensor."""
    root = next((c for c in recording.calls if c.parent is None), None)
    out = set(root.output_ids) if root is not None else set()
    calls = [c for c in recording.calls if c.parent is not None and out & set(c.output_ids)]
    return max(calls, key=lambda c: c.index) if calls else None


def _keeps_width(subject, path: str, width: int) -> bool:
    try:
        module = subject.model.get_submodule(path)
    except AttributeError:
        return False
    return all(p.dim() == 1 and p.shape[0] == width for p in module.parameters())


def _joins(op: OpEvent, width: int, k: int) -> bool:
    """A concatenation of k different tensors, each ``width`` wide, along the last axis (their widths add up to
    the output's; along another axis each would be as wide as the output)."""
    if op.name.rsplit(".", 1)[-1] not in _CONCATENATIONS or len(op.outputs) != 1 or len(op.inputs) != k:
        return False
    different = len(set(op.input_ids)) == len(op.input_ids) == k
    return different and all(t.shape[-1:] == (width,) for t in op.inputs) and op.outputs[0].shape[-1:] == (k * width,)


def as_streams(finding: Finding, streams: Streams) -> Finding:
    """The width failure turned into a warning that says the design it measured and how to silence it."""
    k, d, call, op = streams.k, streams.width, streams.call, streams.joined
    where = f"{short_path(op.file)}:{op.line}" if op.file else "in the forward"
    related = (*finding.related, Related("the streams are concatenated here", op.file, op.line, op.module)) \
        if op.file else finding.related
    return dataclasses.replace(
        finding, status=Status.WARN, related=related,
        message=f"{finding.message}. The output is {k} streams of d_model = {d} side by side: {call.cls} "
        f"'{call.path}' takes at its full width {k * d} the concatenation of {k} different {d}-wide tensors "
        f"({where}), as a reversible residual network returns its two streams, by design. It looks like a "
        "width doubled by mistake, which a head projecting to the wrong width or a tensor concatenated with itself "
        "would be (those stay failures); if this output should be d_model wide, that concatenation is the line to "
        "change, else accept={'shape.contract': 'REASON'} silences this",
        evidence={**finding.evidence, "streams": k, "stream_width": d, "joined_at": where, "taken_by": call.path})
