"""Which recorded ops apply an attention site's scale, and whether the source writes that scale as a constant.

A scale is applied after the product (``scores / 8.0``, ``scores * self.scale``), passed to
F.scaled_dot_product_attention as ``scale=``, or applied to an operand on its way from the projection
(``q = q * 0.125``, as nn.MultiheadAttention does; tfcheck.probe.operand_path records those ops). The statement
behind each is read for a constant (tfcheck.probe.literal_scale). The scale is *written* only where every op that
applies it is a constant and together they make up the measured scale: then it follows no head size at all, and
a head size tfcheck shrank can make it equal a named scale (or even 1/√d_k) by coincidence.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence

from tfcheck.checks.numerics import value_origin
from tfcheck.checks.numerics.scale_diagnosis import Written, close
from tfcheck.probe import literal_scale
from tfcheck.probe.attention_sites import AttentionSite
from tfcheck.probe.operand_path import DIVIDES
from tfcheck.recording.recorder import OpEvent, Recording
from tfcheck.report.findings import Location, Related


def scaling(site: AttentionSite, recording: Recording) -> tuple[OpEvent | None, float | None]:
    """The op that scales the site's scores by a constant, and the constant (sdpa: its scale= argument)."""
    if site.form == "sdpa":
        scale = site.options.get("scale")
        return (site.score_op, float(scale)) if isinstance(scale, (int, float)) else (None, None)
    made = set(site.score_op.output_ids)
    end = site.softmax_op.index if site.softmax_op is not None else len(recording.ops)
    for op in recording.ops[site.score_op.index + 1:end]:
        if op.level != "function" or not made & set(op.input_ids):
            continue
        value = constant(op)
        if op.short_name in value_origin.SCALINGS and value is not None:
            return op, value
        made |= set(op.output_ids)  # a re-view or mask of the scores before they are scaled
    return None, None


def constant(op: OpEvent) -> float | None:
    """The one plain number an op received, or None."""
    numbers = list(op.scalars.get("positional", {}).values()) + \
        [v for k, v in op.scalars.items() if k != "positional" and isinstance(v, (int, float))]
    return float(numbers[0]) if len(numbers) == 1 else None


def written_scale(site: AttentionSite, recording: Recording, frames: dict, operand_scalings: Sequence[OpEvent],
                  measured: float) -> Written | None:
    """The site's scale where the source writes it as constants: the op that scales the scores (``/ 8.0``, a
    literal passed to a shared helper, ``scale=0.125``) and the ops that scale q or k before the product, each
    read at the line that chose its number; None where one of them is computed, or where they do not make up the
    ``measured`` scale (a learned temperature or a norm's gain sets the rest)."""
    op, value = scaling(site, recording)
    if site.form == "sdpa" and op is None:
        return None  # sdpa's default scale is 1/√q.size(-1): computed from the head size
    applied = [(op, value, site.form != "sdpa" and op.short_name in DIVIDES)] if op is not None else []
    applied += [(o, constant(o), o.short_name in DIVIDES) for o in operand_scalings]
    literals: list[literal_scale.Literal] = []
    factor = 1.0
    for each, number, divides in applied:
        if number is None or number == 0:
            return None
        found = value_origin.chosen_at(frames.get(each.index) or (), number)
        file, line = (found[0].file, found[0].line) if found else (each.file or site.file, each.line or site.line)
        literal = literal_scale.written_constant(file, line, number)
        if literal is None:
            return None
        literals.append(literal)
        factor *= 1 / number if divides else number
    if not literals or not math.isfinite(factor) or factor == 0 or not close(factor, measured):
        return None
    return Written(literals[0], factor, len(applied) == 1 and applied[0][2], tuple(literals[1:]))


def at_constant(site: AttentionSite, written: Written | None,
                where: tuple[Location, tuple[Related, ...]]) -> tuple[Location, tuple[Related, ...]]:
    """Where a finding about a written scale points: the line that writes the number (``self.scale = 0.125`` in
    ``__init__``, ``q = q * 0.125``), the line that applied it related; ``where`` unchanged otherwise."""
    location, related = where
    if written is None:
        return where
    literal = written.literal
    at, scores = _place(location.file, location.line), _place(site.file, site.line)
    if _place(literal.file, literal.line) == at:
        return where
    role = "the scores are computed here" if at == scores else "the scale is applied here"
    kept = tuple(r for r in related if _place(r.file, r.line) not in {at, _place(literal.file, literal.line)})
    # The location keeps the recording's spelling of the file where the constant is in the same one.
    file = location.file if location.file and _place(location.file, 0)[0] == _place(literal.file, 0)[0] else \
        literal.file
    return (Location(location.module, file, literal.line),
            (Related(role, location.file, location.line, location.module), *kept))


def _place(file: str | None, line: int | None) -> tuple[str | None, int | None]:
    """A line's place, the file's spelling aside (a frame's path and the recording's may differ)."""
    return (os.path.realpath(file) if file else file), line
