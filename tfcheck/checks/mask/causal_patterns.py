"""Naming a causal leak and saying which line to change (mask.causal): the troubleshooting pattern a leak map
shows, and what the recorded forward of the perturbed batch (causal_trace.CausalTrace, with the attention sites and
masks of causal_masks.MaskReader) says about it.

Apart from mask_causal.py so that the check reads as measure, judge, report; this module only reads a map or
a recorded trace, and runs nothing.

The line to change, by pattern: for a mask that is missing or wrongly built, where the mask that reaches the first
leaking layer's scores is built (the look-ahead triangle it was made from, the op that made it float, the op that
cut one row of it, or, in the model's own code, the line that made the mask handed to the layer, and of a mask
joined from a padding part and a (query, key) part, the line of the latter); for a mask applied
after the softmax or filled with too small a value, the applying line; for statistics over the sequence, the op;
for a leak with a right mask, the op where the leak first appears. When no mask reaches the scores at all, the line
that computes the scores, with the reason (the line that should build the mask cannot be known).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from tfcheck.checks.mask.causal_masks import (
    TRIANGLES,
    Applied,
    Site,
    blocked_summary,
    effective,
    entering,
    float_origin,
    narrowed,
    shape_layout,
    site_problem,
    triangle,
)
from tfcheck.checks.mask.causal_nodes import Node
from tfcheck.checks.mask.causal_trace import CausalTrace

#: pattern -> (troubleshooting row, what it means); "diagonal off by K" for K >= 2 is ``describe``'s.
PATTERNS = {
    "no mask at all": ("inference-worse-than-training",
                       "every position depends on every later one: no causal mask reaches the attention"),
    "diagonal off by one": ("causal-mask-misaligned",
                            "position t depends on t+1 only: the mask's diagonal is shifted by one "
                            "(tril(..., diagonal=1), or triu(..., diagonal=2) for a may-not-attend mask)"),
    "diagonal masked": ("causal-mask-misaligned",
                        "the mask blocks the diagonal too (triu(..., diagonal=0) used as the may-not-attend mask, "
                        "or tril(..., diagonal=-1) as the keep mask): no position may attend to itself, so "
                        "position 0 has no key left and attends uniformly over the whole sequence, the future "
                        "included (with a -inf fill its output is NaN instead)"),
    "inverted": ("causal-mask-misaligned",
                 "the past does not matter but the future does: the mask is inverted (attends only to "
                 "the future; tril where triu was meant, or a keep mask given where a may-not-attend mask is "
                 "expected)"),
    "query-axis mask": ("causal-mask-misaligned",
                        "the mask that reaches the attention scores is laid out on the query axis ((..., s, 1)): "
                        "it can only block whole query rows, never a later key, so every position still sees "
                        "the future"),
    "wrong broadcast": ("causal-mask-misaligned",
                        "the look-ahead mask is built, but what reaches the scores is one row of it ((..., 1, s)) "
                        "broadcast over every query: each query is given the same keys, so the triangle is lost "
                        "(e.g. the row of the last position, as in one-step decoding, used for a whole sequence)"),
    "normalisation leak": ("causal-mask-ineffective",
                           "the mask is applied after the softmax, so the future still enters the "
                           "normalising sum"),
    "float 0/1 mask added": ("causal-mask-ineffective",
                             "a float 0/1 mask is given to an API that ADDS float masks "
                             "(F.scaled_dot_product_attention, nn.MultiheadAttention), or added to the scores, so "
                             "it shifts scores by 0 or 1 and masks nothing"),
    "fill value too small": ("causal-mask-ineffective",
                             "masked scores are filled with a value too small to mask (e.g. -1e-12)"),
    "statistics over the sequence": ("sequence-statistics-leak",
                                     "a normalisation or statistic is taken over the sequence axis (e.g. "
                                     "layer_norm over (s, d)), so every position sees the others"),
    "leak outside the mask": ("causal-leak",
                              "the causal mask that reaches every attention of the layer is right, yet outputs "
                              "depend on later positions: an op after (or outside) the masked attention mixes "
                              "positions"),
    "partial leak": ("causal-leak", "some positions depend on later ones, in no shape tfcheck recognises"),
}
_OFF_BY = re.compile(r"diagonal off by (\d+)")


def off_by(k: int) -> str:
    """The name of a diagonal shifted by ``k`` (position t sees t+1 ... t+k)."""
    return "diagonal off by one" if k == 1 else f"diagonal off by {k}"


def describe(pattern: str) -> tuple[str, str]:
    """(troubleshooting row, meaning) of a pattern name."""
    if pattern in PATTERNS:
        return PATTERNS[pattern]
    k = int(_OFF_BY.fullmatch(pattern).group(1))  # type: ignore[union-attr]  # only off_by names are made
    return ("causal-mask-misaligned",
            f"position t depends on t+1 to t+{k}: the mask's diagonal is shifted by {k} (tril(..., diagonal={k}), "
            f"or triu(..., diagonal={k + 1}) for a may-not-attend mask)")


def largest_change(dep: torch.Tensor, where: torch.Tensor) -> float:
    """The largest measured entry of the leak map ``dep`` where ``where`` is True (NaN entries were not
    measured); 0 when none was."""
    values = dep[where & ~dep.isnan()]
    return float(values.max()) if values.numel() else 0.0


def leak_counts(dep: torch.Tensor, tol: float) -> tuple[int, int]:
    """(pairs that leak, pairs measured) among the (query, later key) pairs of a leak map."""
    n = dep.shape[0]
    measured = torch.ones(n, n, dtype=torch.bool).triu(1) & ~dep.isnan()
    return int((measured & (dep > tol)).sum()), int(measured.sum())


def shape_pattern(dep: torch.Tensor, tol: float) -> str:
    """The pattern a one-hop leak map shows (the first leaking layer's, else the output's)."""
    n = dep.shape[0]
    forbidden = torch.ones(n, n, dtype=torch.bool).triu(1)
    past = torch.ones(n, n, dtype=torch.bool).tril(-1)
    measured = forbidden & ~dep.isnan()  # rows of non-finite outputs say nothing
    leaked = (dep > tol) & measured
    offset = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # k - q
    offsets = {int(o) for o in offset[leaked].tolist()}
    fraction = float(leaked.sum()) / max(int(measured.sum()), 1)
    if offsets and offsets == set(range(1, max(offsets) + 1)):
        reach = measured & (offset <= max(offsets))
        if bool(leaked[reach].all()) and max(offsets) < n - 1:
            return off_by(max(offsets))
    rows = {int(q) for q in leaked.nonzero()[:, 0].tolist()}
    if rows == {0} and float(leaked[0].sum()) >= 0.9 * max(int(measured[0].sum()), 1) and n > 2:
        return "diagonal masked"  # only position 0 sees the future: it has nothing else to attend to
    if fraction >= 0.5 and largest_change(dep, past) <= tol:
        return "inverted"
    if fraction >= 0.9:
        return "no mask at all"
    return "partial leak"


# ----- from the trace to a pattern and a line -------------------------------------------------------------

@dataclass
class Place:
    """A line of the story: its role, where it is, and the module it ran in."""

    role: str
    file: str | None
    line: int | None
    module: str | None = None


@dataclass
class Diagnosis:
    """What the recorded forward says: the pattern (None: the map alone names it), the line to change, why it is
    no more precise, the other lines of the story, and the op that shows it (for the message and evidence)."""

    pattern: str | None
    primary: Place | None
    reason: str | None = None
    related: list[Place] = field(default_factory=list)
    op: dict | None = None  # name, file, line, detail
    mask: dict | None = None  # what the mask that reaches the scores blocks
    site_module: str | None = None  # the module of the attention it is about


def _place(role: str, where: tuple[str | None, int | None], module: str | None) -> Place:
    return Place(role, where[0], where[1], module)


def _built(applied: list[Applied], layer: str | None) -> tuple[Place | None, list[Place], str | None]:
    """Where the mask that reaches the scores is built: (the line in the model's own code, more lines, a reason
    when the line cannot be known)."""
    for a in applied:
        if a.mask is None:
            if a.source is not None:
                return None, [], f"the mask is {a.source}, made before the forward: its construction line is not " \
                                 "recorded"
            continue
        node, joins = pattern_walk(entering(a.mask, layer))
        own = node.own if node.own[0] else node.where
        more = []
        if node.where != own and node.file:
            more.append(_place("mask built (inside the helper it calls)", node.where, node.module))
        for join in joins:  # the line that joined the part named with another (a padding mask)
            where = join.own if join.own[0] else join.where
            if where != own:
                more.append(_place("mask joined with another part", where, join.module))
        leaves = [s for n in a.mask.lineage() for s in n.sources if s and s.startswith("buffer")]
        reason = (f"the mask is cut from {leaves[0]}, made before the forward: the line that builds that buffer is "
                  "not recorded") if leaves else None
        return _place("mask built", own, node.module), more, reason
    return None, [], None


#: Ops that move or retype a mask's values without choosing them: the line that chose the pattern is before them.
_RESHAPING = frozenset({"expand", "expand_as", "view", "reshape", "unsqueeze", "squeeze", "repeat", "bool", "float",
                        "to", "type_as", "contiguous", "broadcast_to", "long", "int", "half"})
#: Ops that join two masks into one (a padding part and a look-ahead part, as ``pad & causal`` or
#: ``causal.masked_fill(pad, -inf)``): the join is right when each part is, so the line to change is a part's.
_COMBINING = frozenset({"__and__", "__rand__", "__iand__", "and_", "bitwise_and", "logical_and", "__or__", "__ror__",
                        "__ior__", "or_", "bitwise_or", "logical_or", "__mul__", "__rmul__", "__imul__", "mul",
                        "mul_", "__add__", "__radd__", "__iadd__", "add", "add_", "masked_fill", "masked_fill_",
                        "minimum", "maximum", "where"})


def pattern_origin(node: Node) -> Node:
    """The op that chose a mask's pattern: ``torch.ones(t, t)`` rather than the ``.expand(b, 1, t, t)`` that laid it
    out for the scores (walked back through reshaping ops to a parent made in the model's code), nor the
    ``pad & square`` that joined it with a padding mask (walked into the part laid out over (query, key))."""
    return pattern_walk(node)[0]


def pattern_walk(node: Node) -> tuple[Node, list[Node]]:
    """``pattern_origin`` and the joins it walked through, nearest the scores first."""
    joins: list[Node] = []
    for _ in range(200):
        name = node.op.rsplit(".", 1)[-1]
        if name in _RESHAPING:
            parents = [p for p in node.parents if p is not None and p.masky and p.file]
            if len(parents) != 1:
                break
            node = parents[0]
        elif name in _COMBINING and (part := square_part(node)) is not None:
            joins.append(node)
            node = part
        else:
            break
    return node, joins


def square_part(join: Node) -> Node | None:
    """The operand of a join that carries the (query, key) structure: the one laid out over both axes when every
    other operand broadcasts over one of them (a padding mask, (b, 1, 1, s) or (b, 1, s, 1)); else the one made
    from a triangle when only one is. None when no operand is made in the model's code or the choice is not
    clear (two full squares, neither from a triangle)."""
    operands = [p for p in join.parents if p is not None]
    squares = [p for p in operands if min(shape_layout(p.shape)) > 1]
    if len(squares) > 1:
        squares = [p for p in squares if any(n.op in TRIANGLES for n in p.lineage())]
    if len(squares) != 1 or not (squares[0].masky and squares[0].file):
        return None
    return squares[0]


def diagnose(trace: CausalTrace, layer: str | None, layer_map: torch.Tensor | None, tol: float) -> Diagnosis:
    """The pattern and the line to change, from the recorded forward; ``layer_map`` is the first leaking layer's
    one-hop map (None when the leak was read at the output only), so a pattern read off the mask can be checked
    against what was measured."""
    n = trace.n
    first = trace.first_leak
    leak_place = [_place("leak first appears", first.where, first.module)] if first is not None and first.file \
        else []
    statistic = next((c for c in trace.clues if first is None or c.index == first.index
                      or (c.index < first.index and (c.file, c.line) == first.where)), None)
    if statistic is not None:
        op = {"name": statistic.op, "file": statistic.file, "line": statistic.line, "detail": statistic.detail}
        return Diagnosis("statistics over the sequence", Place("statistic over the sequence", statistic.file,
                                                               statistic.line, statistic.module),
                         related=leak_place, op=op)
    sites = [s for s in trace.sites if layer is None or s.module == layer or s.module.startswith(layer + ".")]
    for site in sites:
        problem = site_problem(site, n, off_by)
        if problem is None:
            continue
        pattern, applied = problem
        diagnosis = _located(site, pattern, applied, layer, n)
        diagnosis.related += leak_place
        diagnosis.site_module = site.module
        if layer_map is not None and pattern.startswith("diagonal off by"):
            shown = shape_pattern(layer_map, tol)
            if shown != pattern:  # the measured one-hop map disagrees with the mask: name what was measured
                diagnosis.pattern = shown
        return diagnosis
    if sites:
        blocked, blocking = effective(sites[0])
        related = _site_lines(sites[0], blocking, layer)
        place = _place("leak first appears", first.where, first.module) if first is not None and first.file \
            else None
        reason = None if place is not None else "the op that mixes positions outside the masked attention is not " \
                                                "known"
        mask = blocked_summary(blocked) if blocked is not None else None
        return Diagnosis("leak outside the mask", place, reason, related, mask=mask, site_module=sites[0].module)
    if first is not None and first.file:
        return Diagnosis(None, _place("leak first appears", first.where, first.module))
    return Diagnosis(None, None, "no attention over the sequence and no op where the leak appears were recorded")


def _site_lines(site: Site, applied: list[Applied], layer: str | None) -> list[Place]:
    """The lines of one site's story: where its mask is built and applied, where its scores are computed."""
    places: list[Place] = []
    built, more, _ = _built(applied, layer)
    if built is not None:
        places.append(built)
    places += more
    for a in applied:
        places.append(_place("mask applied", a.node.where, a.node.module))
    if site.kind == "softmax":
        if site.scores is not None:
            places.append(_place("scores computed", site.scores.where, site.scores.module))
    else:
        call = "scaled_dot_product_attention" if site.kind == "sdpa" else "multi_head_attention_forward"
        places.append(_place(f"scores computed ({call})", site.node.where, site.node.module))
    if site.layer_line[0] and all((p.file, p.line) != site.layer_line for p in places):
        places.append(_place("attention called in the layer", site.layer_line, layer))
    return places


def _located(site: Site, pattern: str, applied: list[Applied], layer: str | None, n: int) -> Diagnosis:
    """The line to change for one site's pattern, the other lines, and why the line is no more precise."""
    related = _site_lines(site, applied, layer)
    built, _, build_reason = _built(applied, layer)
    blocked, _ = effective(site)
    mask = blocked_summary(blocked) if blocked is not None else None
    scores = (_place("scores computed", site.scores.where, site.scores.module) if site.scores is not None
              else _place("scores computed", site.node.where, site.node.module))
    if pattern in ("normalisation leak", "fill value too small"):
        a = applied[0]
        detail = ("a mask is applied to the attention weights after the softmax, and none before it"
                  if pattern == "normalisation leak" else a.detail)
        op = {"name": a.node.op, "file": a.node.file, "line": a.node.line, "detail": detail}
        return Diagnosis(pattern, _place("mask applied", a.node.where, a.node.module), related=related, op=op,
                         mask=mask)
    if pattern == "float 0/1 mask added":
        a = applied[0]
        made = float_origin(a.mask) if a.mask is not None else None
        op = {"name": a.node.op, "file": a.node.file, "line": a.node.line, "detail": a.detail}
        if made is not None and made.file:
            related.insert(0, _place("mask made float", made.where, made.module))
            return Diagnosis(pattern, _place("mask made float", made.where, made.module), related=related, op=op)
        return Diagnosis(pattern, _place("mask applied", a.node.where, a.node.module), build_reason, related, op)
    if pattern == "no mask at all" and not applied and site.unused:
        lost = site.unused[0].node
        related.insert(0, scores)
        return Diagnosis(pattern, _place("mask applied to a copy never used", lost.where, lost.module), (
            f"{lost.op} made a masked copy of the scores and its result never reached the softmax (an out-of-place "
            f"op whose result is discarded): assign it (x = x.{lost.op}(...)) or use the in-place {lost.op}_"),
            related, mask=None)
    if pattern == "no mask at all" and not applied:
        why = (f"no mask reaches the attention scores of '{layer or site.module}': the line that should build or "
               "pass one is not known, so this is the line that computes the scores")
        return Diagnosis(pattern, scores, why, related, mask=None)
    if pattern == "wrong broadcast":
        cut = narrowed(applied)
        if cut is not None and cut.file:
            related.insert(0, _place("one row of the mask taken", cut.where, cut.module))
            return Diagnosis(pattern, _place("one row of the mask taken", cut.where, cut.module),
                             related=related, mask=mask)
    made = triangle(applied) if pattern != "no mask at all" else None
    if made is not None and made.file:
        if all((p.file, p.line) != made.where for p in related):
            related.insert(0, _place("look-ahead triangle built", made.where, made.module))
        return Diagnosis(pattern, _place("look-ahead triangle built", made.where, made.module), build_reason,
                         related, mask=mask)
    if built is not None and built.file:
        return Diagnosis(pattern, built, build_reason, related, mask=mask)
    if applied:
        a = applied[0]
        return Diagnosis(pattern, _place("mask applied", a.node.where, a.node.module),
                         build_reason or "the mask reaches the scores from outside the recorded forward", related,
                         mask=mask)
    return Diagnosis(pattern, scores, build_reason, related, mask=mask)
