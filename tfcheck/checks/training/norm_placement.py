"""norm.placement: Post-LN or Pre-LN, read from the recorded dataflow; a Post-LN model whose declared
schedule has no warmup gets a warning.

A norm is Post-LN when its input is the output of a residual add and its output carries the stream into
the next residual; Pre-LN when its input is the stream a residual add skips and its output feeds that
residual's sublayer. Both are read from tensor identities in one recorded forward, not from names.
"""
from __future__ import annotations

from dataclasses import dataclass

from tfcheck.checks.shape.shape_residual import Dataflow
from tfcheck.engine.registry import check
from tfcheck.probe import recorded_probe
from tfcheck.probe.schedules import (
    DECLARE_SCHEDULE,
    MAX_PLANNED_STEPS,
    find_schedule,
    lr_curve,
    schedule_lines,
    sparkline,
)
from tfcheck.recording.recorder import Recording
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "norm.placement"
NORM_OPS = frozenset({"layer_norm", "rms_norm", "group_norm"})
#: RMSNorm written by hand (Llama, T5): x * rsqrt(mean(x^2) + eps) inside one module.
RMS_OPS = frozenset({"rsqrt"})
#: LayerNorm written by hand (the Annotated Transformer, the books): a_2 * (x - mean) / (std + eps) + b_2 inside
#: one module: a mean and a spread of the same tensor over its last axis.
SPREAD_OPS = frozenset({"std", "var", "std_mean", "var_mean"})
#: A schedule "warms up" when its first rate is below this share of its peak over the first steps.
WARMUP_RATIO = 0.5
WARMUP_LOOK = 2000


@dataclass
class Norm:
    where: str
    input_id: int
    output_id: int
    file: str | None = None  # the user's line that applies it
    line: int | None = None

    @property
    def location(self) -> Location:
        if self.file and self.line:
            return Location(self.where, self.file, self.line)
        return Location(self.where, reason="the norm is applied by library code with no line of yours")


@check(ID, "Post-LN or Pre-LN from the recorded ops; Post-LN without warmup is warned about",
       rows=("post-ln-without-warmup",), kinds=("encoder", "decoder", "seq2seq", None), order=80)
def norm_placement(ctx) -> list[Finding]:
    """One recorded forward at the probe size (tensor identities on). Each LayerNorm / RMSNorm is placed
    relative to the residual adds found by shape.residual's dataflow: after the add (Post-LN) or in front
    of the sublayer (Pre-LN). A Post-LN model's declared schedule is stepped (no model pass): if its first
    rate is already at least half its peak, it has no warmup, which Post-LN needs."""
    subject = ctx.subject
    graph = Dataflow(recorded_probe.shared(ctx).recording)
    norms = _norms(graph.rec)
    if not norms:
        return [ctx.not_applicable(ID, "no LayerNorm or RMSNorm op (nor one written by hand) in the recorded "
                                   "forward: there is no norm to place", {"norms": 0})]
    residuals = graph.residuals()
    post, pre = _placed(graph, norms, residuals)
    evidence = {"norms_seen": len(norms), "post_ln": [n.where for n in post], "pre_ln": [n.where for n in pre],
                "residual_adds": len(residuals)}
    if not post and not pre:
        return [Finding(ID, Status.SKIP, f"inconclusive: {len(norms)} norm(s) seen but none sits at a residual "
                        f"add ({len(residuals)} residual adds found), so the placement cannot be read",
                        evidence=evidence)]
    placement = "Post-LN" if post and not pre else "Pre-LN" if pre and not post else "mixed Post-LN and Pre-LN"
    evidence["placement"] = placement
    where = (post or pre)[0].location
    if not post:
        return [Finding(ID, Status.PASS, f"Pre-LN: {len(pre)} norms in front of their sublayers "
                        f"({_few(pre)}); Pre-LN trains stably without warmup", where, evidence)]
    return [_post_ln(subject, placement, post, where, evidence)]


def _norms(rec: Recording) -> list[Norm]:
    """Normalisations: a layer_norm / rms_norm op, or a module computing one by hand (x * rsqrt(...), or
    (x - mean) / (std + eps) over the last axis)."""
    out = []
    for op in rec.ops:
        if op.level == "function" and op.short_name in NORM_OPS and op.input_ids and op.output_ids:
            out.append(Norm(op.module, op.input_ids[0], op.output_ids[0], op.file, op.line))
    seen = {n.output_id for n in out}
    for call in rec.calls:
        direct = [o for o in rec.ops_in(call) if o.call == call.index and o.level == "function"]
        if call.input_ids and call.output_ids and call.output_ids[0] not in seen and \
                not any(o.short_name in NORM_OPS for o in direct) and (
                    any(o.short_name in RMS_OPS for o in direct) or _standardises(call.input_ids[0], direct)):
            first = next((o for o in direct if o.file), None)
            file, line = (first.file, first.line) if first is not None else (None, None)
            out.append(Norm(call.path, call.input_ids[0], call.output_ids[0], file, line))
    return out


def _standardises(x: int, ops: list) -> bool:
    """A mean and a spread (std / var) of the module's input ``x`` over its last axis, both in the module."""
    def over_last_axis(op) -> bool:
        if not op.input_ids or op.input_ids[0] != x or not op.inputs:
            return False
        dim = op.scalars.get("dim", op.scalars.get("positional", {}).get(1))
        return dim in (-1, len(op.inputs[0].shape) - 1)
    return any(o.short_name == "mean" and over_last_axis(o) for o in ops) and \
        any(o.short_name in SPREAD_OPS and over_last_axis(o) for o in ops)


def _placed(graph: Dataflow, norms: list[Norm], residuals) -> tuple[list[Norm], list[Norm]]:
    streams, sums = [], set()
    # An exact copy (residual = x.clone(), tfcheck.probe.value_copies) is read as the tensor it copies, on both
    # sides: the skipped operand is then the stream the norm read, and a norm may read a copy of a sum.
    original = graph.copies.original
    for r in residuals:
        a, b = (original(t) for t in r.add.input_ids)
        # The skipped stream is the operand the other was computed from.
        stream, branch = (a, b) if graph.depends(b, {a}) else (b, a)
        streams.append((stream, branch))
        sums.update(r.add.output_ids)
    post = [n for n in norms if original(n.input_id) in sums and any(n.output_id == s for s, _ in streams)]
    pre = [n for n in norms if any(original(n.input_id) == s and graph.depends(b, {n.output_id}) for s, b in streams)]
    return post, pre


def _post_ln(subject, placement: str, post: list[Norm], where: Location, evidence: dict) -> Finding:
    head = f"{placement}: {len(post)} norms after their residual adds ({_few(post)})"
    warmup = subject.facts.warmup_steps
    schedule = find_schedule(subject)
    if schedule is None:
        if warmup:
            return Finding(ID, Status.PASS, f"{head}; warmup_steps={warmup} is declared", where, evidence)
        return Finding(ID, Status.PASS, f"{head}. Post-LN needs a learning-rate warmup; no schedule is declared, so "
                       f"that is not judged ({DECLARE_SCHEDULE})", where, {**evidence, "schedule": None})
    curve = lr_curve(subject, schedule, steps=_look(subject))
    if curve.error is not None or not curve.rates:
        why = curve.error or curve.limitation
        return Finding(ID, Status.PASS, f"{head}; the schedule could not be stepped ({why}), so its warmup is not "
                       "judged here (lr.warmup reports it)", where, evidence)
    peak = max(curve.rates)
    first = curve.rates[0]
    evidence.update(schedule=schedule.source, first_rate=first, peak_rate=peak, peak_step=curve.peak_step,
                    curve=sparkline(curve.rates), tolerance=f"first rate < {WARMUP_RATIO} x peak")
    if peak > 0 and first >= WARMUP_RATIO * peak:
        # The line to change is the schedule's (warm up), the norm's placement being the other fix.
        lines = schedule_lines(curve)
        at = Location(where.module, *lines.at) if lines.at else Location(where.module, reason=lines.reason)
        related = (Related("the Post-LN norm", where.file, where.line, where.module),) if where.file else ()
        return Finding(ID, Status.WARN, f"{head}, and {schedule.source} has no warmup: it starts at {first:.3g}, "
                       f"{first / peak:.0%} of its peak {peak:.3g}. At initialisation a Post-LN model's gradients "
                       "near the output are large, so full-rate first steps tend to diverge (Xiong et al., 2020). "
                       "Warm up (a few thousand steps) or use Pre-LN (norm_first=True) with a final norm",
                       at, evidence, row="post-ln-without-warmup", related=related)
    return Finding(ID, Status.PASS, f"{head}; {schedule.source} warms up from {first:.3g} to {peak:.3g} at step "
                   f"{curve.peak_step}", where, evidence)


def _look(subject) -> int:
    """Steps enough to see a declared warmup end (twice its length), at least WARMUP_LOOK."""
    return min(max(WARMUP_LOOK, 2 * (subject.facts.warmup_steps or 0)), MAX_PLANNED_STEPS)


def _few(norms: list[Norm], n: int = 3) -> str:
    names = list(dict.fromkeys(x.where or "<root>" for x in norms))
    return ", ".join(names[:n]) + (f", ... ({len(names)} modules)" if len(names) > n else "")
