"""The attention sites of mask.causal's recorded forward and the masks that reach their scores (read by a
``MaskReader`` that ``causal_trace.CausalTrace`` feeds), and what those masks say about a leak.

A site is an attention over (length, length): a softmax over scores made by a product of activations,
``F.scaled_dot_product_attention``, or torch's multi-head attention. A mask is *applied* to a site's scores by
``masked_fill(scores, mask, value)``, ``where(mask, scores, value)``, an added (or subtracted) mask, or the
``attn_mask`` / ``key_padding_mask`` / ``is_causal`` of torch's attention; to its weights (after the softmax) by a
``masked_fill`` or a product. What each mask blocks is read from its values, on the first (query, key) plane of the
scores it meets: the structure of the forward, never the output a check measures.
"""
from __future__ import annotations

from typing import Any

import torch

from tfcheck.checks.mask.causal_nodes import Applied, CausalTrace, Node, Site
from tfcheck.model.trial.mask_uses import ADDS, BLOCKING
from tfcheck.probe.attention_sites import PRODUCTS, SOFTMAXES

_FILLS = frozenset({"masked_fill", "masked_fill_"})
_SUBS = frozenset({"sub", "__sub__", "sub_", "__isub__"})
_MULS = frozenset({"mul", "__mul__", "__rmul__", "mul_", "__imul__"})
#: Ops that carry attention weights on unchanged (a dropout of the weights is still the weights).
_CARRY = frozenset({"dropout", "dropout_", "contiguous", "clone", "to", "type_as", "float", "view", "reshape"})
#: Ops that build a look-ahead triangle.
TRIANGLES = frozenset({"tril", "triu", "tril_", "triu_"})
MHA = "multi_head_attention_forward"
SDPA = "scaled_dot_product_attention"


class MaskReader:
    """Reads the attention sites over (``n``, ``n``) of a recorded forward and the masks applied to them."""

    def __init__(self, n: int):
        self.n = n
        self.sites: list[Site] = []
        self._applications: list[Node] = []  # every op that applied a mask, used or not

    def observe(self, trace: CausalTrace, node: Node, args: tuple, kwargs: dict, inputs: list, parents: tuple,
                first: Any) -> None:
        self._mark_scores(node, inputs, parents, first)
        if node.op in SOFTMAXES:
            self._softmax_site(trace, node, args, kwargs, parents)
        elif node.op == SDPA:
            self._sdpa_site(trace, node, args, kwargs)
        elif node.op == MHA:
            self._mha_site(trace, node, args, kwargs)
        else:
            self._application(trace, node, args, kwargs, inputs, parents, first)

    def _square(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2 and \
            tuple(t.shape[-2:]) == (self.n, self.n)

    def _mark_scores(self, node: Node, inputs: list, parents: tuple, first: Any) -> None:
        if not self._square(first):
            return
        if node.op in PRODUCTS and sum(1 for t in inputs if isinstance(t, torch.Tensor) and t.dim() >= 2) >= 2 \
                and first.dim() >= 3 and not any(p is not None and p.weights is not None for p in parents):
            node.scores = True
        elif any(p is not None and p.scores for p in parents):
            node.scores = True
        if node.op not in SOFTMAXES and node.op in _CARRY:
            node.weights = next((p.weights for p in parents if p is not None and p.weights is not None), None)

    def _softmax_site(self, trace: CausalTrace, node: Node, args: tuple, kwargs: dict, parents: tuple) -> None:
        x = args[0] if args else kwargs.get("input")
        if not isinstance(x, torch.Tensor) or not self._square(x) or x.dim() < 3:
            return
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if isinstance(dim, int) and dim % x.dim() != x.dim() - 1:
            return  # a softmax over another axis is not normalising the keys of these scores
        site = Site("softmax", node, trace.layer_line())
        made = parents[0] if parents else None
        for n in made.lineage("scores") if made is not None and made.scores else []:
            if n.applied is not None:
                site.before.append(n.applied)
            if n.op in PRODUCTS and site.scores is None:
                site.scores = n
        site.before.reverse()  # in the order they ran
        # A mask applied to these scores whose result never reaches the softmax (a masked_fill whose copy is
        # thrown away): the line of the bug when no mask arrives.
        lineage = made.lineage("scores") if made is not None and made.scores else []
        site.unused = [a.applied for a in self._applications if a.applied is not None
                       and not any(a is n for n in lineage) and any(p is not None and any(p is n for n in lineage)
                                                                    for p in a.parents)]
        node.weights = site
        self.sites.append(site)

    def _sdpa_site(self, trace: CausalTrace, node: Node, args: tuple, kwargs: dict) -> None:
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
        got = {k: (args[i] if i < len(args) else kwargs.get(k)) for i, k in enumerate(names)}
        q, k, mask = got["query"], got["key"], got["attn_mask"]
        if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() >= 3
                and q.shape[-2] == self.n and k.shape[-2] == self.n):
            return
        site = Site("sdpa", node, trace.layer_line())
        if isinstance(mask, torch.Tensor):
            site.before.append(self._given(trace, node, mask, (*q.shape[:-1], k.shape[-2]), true_blocks=False))
        if got["is_causal"] is True:
            site.before.append(Applied(node, None, None, torch.ones(self.n, self.n, dtype=torch.bool).triu(1),
                                       (self.n, self.n), detail="is_causal=True"))
        self.sites.append(site)

    def _mha_site(self, trace: CausalTrace, node: Node, args: tuple, kwargs: dict) -> None:
        q, k = (args + (None, None))[:2]
        if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.dim() == 3
                and q.shape[0] == self.n and k.shape[0] == self.n):
            return  # torch's multi-head attention works in (length, batch, features)
        site = Site("mha", node, trace.layer_line())
        mask, padding = kwargs.get("attn_mask"), kwargs.get("key_padding_mask")
        if isinstance(mask, torch.Tensor):
            site.before.append(self._given(trace, node, mask, (self.n, self.n), true_blocks=True))
        if isinstance(padding, torch.Tensor) and padding.dim() == 2:
            site.before.append(self._given(trace, node, padding[:, None, :], (padding.shape[0], self.n, self.n),
                                           true_blocks=True, made_as=padding))
        self.sites.append(site)

    def _given(self, trace: CausalTrace, node: Node, mask: torch.Tensor, shape: tuple, true_blocks: bool,
               made_as: torch.Tensor | None = None) -> Applied:
        """A mask handed to torch's attention: a bool one blocks where it is True (multi-head attention) or False
        (scaled_dot_product_attention); a float one is added to the scores."""
        tensor = made_as if made_as is not None else mask
        made = trace.node_of(tensor)
        source = None if made is not None else trace.source_of(tensor)
        plane, layout = self._plane(mask, shape), _layout(mask)
        if plane is None:
            return Applied(node, made, source, None, layout, detail=f"a mask of shape {tuple(mask.shape)}")
        if plane.dtype == torch.bool:
            return Applied(node, made, source, plane if true_blocks else ~plane, layout,
                           detail=f"a bool mask of shape {tuple(mask.shape)}")
        zero_one = _zero_one(plane)
        return Applied(node, made, source, plane <= BLOCKING, layout, zero_one=zero_one,
                       detail=f"a float {'0/1 ' if zero_one else ''}mask of shape {tuple(mask.shape)}, which "
                              f"{node.op} adds to the scores")

    def _plane(self, t: torch.Tensor, shape: tuple) -> torch.Tensor | None:
        """``t`` broadcast to ``shape`` (the scores'), its first (query, key) plane; None if it does not broadcast."""
        try:
            full = torch.broadcast_to(t.detach(), torch.broadcast_shapes(tuple(t.shape), tuple(shape)))
        except RuntimeError:
            return None
        if full.dim() < 2 or tuple(full.shape[-2:]) != (self.n, self.n):
            return None
        return full.reshape(-1, self.n, self.n)[0].cpu()

    def _application(self, trace: CausalTrace, node: Node, args: tuple, kwargs: dict, inputs: list, parents: tuple,
                     first: Any) -> None:
        """A mask applied to the scores before the softmax, or to the weights after it."""
        weights = next((p.weights for p in parents if p is not None and p.weights is not None), None)
        scored = [t for t, p in zip(inputs, parents) if p is not None and p.scores and p.weights is None]
        if weights is not None:
            target = next((t for t, p in zip(inputs, parents) if p is not None and p.weights is weights), None)
        else:
            target = scored[0] if scored else None
        if target is None or not self._square(first):
            return
        shape, name = tuple(target.shape), node.op
        others = [t for t in inputs if t is not target]
        fill_mask = args[1] if len(args) > 1 else kwargs.get("mask")
        if name in _FILLS and isinstance(fill_mask, torch.Tensor):
            value = _scalar(args[2] if len(args) > 2 else kwargs.get("value"))
            plane = self._plane(fill_mask.bool(), shape)
            applied = self._applied(trace, node, fill_mask, plane if value is not None and value <= BLOCKING else None,
                                    value, f"masked_fill with value {value:g}" if value is not None else "masked_fill")
        elif name == "where" and len(args) == 3 and isinstance(args[0], torch.Tensor):
            keep_scores = args[1] is target
            fill = _scalar(args[2] if keep_scores else args[1])
            plane = self._plane(args[0].bool(), shape)
            blocked = None if plane is None or fill is None or fill > BLOCKING else (~plane if keep_scores else plane)
            applied = self._applied(trace, node, args[0], blocked, fill, "where")
        elif name in ADDS | _SUBS | (_MULS if weights is not None else frozenset()) and others:
            mask = others[0]
            made = trace.node_of(mask)
            plane = self._plane(mask, shape)
            if (made is not None and made.scores) or plane is None or not _mask_values(plane):
                return  # a second score term, a bias (ALiBi, relative positions) or a scale: not a mask
            if name in _MULS:
                applied = self._applied(trace, node, mask, plane == 0, None, f"{name} by a mask")
            else:
                blocked = plane >= -BLOCKING if name in _SUBS else plane <= BLOCKING
                applied = self._applied(trace, node, mask, blocked, None, f"{name} of a mask")
                applied.zero_one = name not in _SUBS and _zero_one(plane.float())
                if applied.zero_one:
                    applied.detail = f"a float 0/1 tensor of shape {tuple(mask.shape)} added to the scores"
        else:
            return
        node.applied = applied
        self._applications.append(node)
        if weights is not None:
            weights.after.append(applied)
            node.weights = weights

    def _applied(self, trace: CausalTrace, node: Node, mask: torch.Tensor, blocked, value, detail: str) -> Applied:
        made = trace.node_of(mask)
        return Applied(node, made, None if made is not None else trace.source_of(mask), blocked, _layout(mask),
                       value, detail=detail)


def _scalar(value: Any) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return float(value) if isinstance(value, (int, float)) else None


def _layout(mask: torch.Tensor) -> tuple[int, int]:
    """The (query, key) sizes of a mask as it meets (..., query, key) scores: 1 where it broadcasts."""
    return shape_layout(tuple(mask.shape))


def shape_layout(shape: tuple[int, ...]) -> tuple[int, int]:
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return 1, shape[0]
    return shape[-2], shape[-1]


def _mask_values(plane: torch.Tensor) -> bool:
    """Values a mask has: bool, or floats that are each 0, 1 or blocking (-inf, finfo.min, -1e9)."""
    if plane.dtype == torch.bool:
        return True
    return bool(((plane == 0) | (plane == 1) | (plane <= BLOCKING) | (plane >= -BLOCKING)).all())


def _zero_one(values: torch.Tensor) -> bool:
    if values.dtype == torch.bool:
        return False
    zero, one = values == 0, values == 1
    return bool((zero | one).all()) and bool(zero.any()) and bool(one.any())


# ----- what the masks of a site say ------------------------------------------------------------------------

def effective(site: Site) -> tuple[torch.Tensor | None, list[Applied]]:
    """What the masks applied to a site's scores block together (None: none blocks anything it can be read as),
    and the applications that do block, those that block something first."""
    blocking = [a for a in site.before if a.blocked is not None and not a.zero_one]
    planes = [a.blocked for a in blocking if a.blocked is not None]
    if not planes:
        return None, []
    blocking.sort(key=lambda a: a.blocked is None or not bool(a.blocked.any()))
    total = planes[0].clone()
    for plane in planes[1:]:
        total |= plane
    return total, blocking


def blocked_summary(blocked: torch.Tensor) -> dict:
    """How many (query, later key), (query, earlier key) and (query, itself) pairs a mask blocks (evidence)."""
    n = blocked.shape[0]
    forbidden, past = torch.ones(n, n, dtype=torch.bool).triu(1), torch.ones(n, n, dtype=torch.bool).tril(-1)
    eye = torch.eye(n, dtype=torch.bool)
    return {"future_blocked": int((blocked & forbidden).sum()), "future_pairs": int(forbidden.sum()),
            "past_blocked": int((blocked & past).sum()), "past_pairs": int(past.sum()),
            "diagonal_blocked": int((blocked & eye).sum()), "length": n}


def site_problem(site: Site, n: int, off_by) -> tuple[str, list[Applied]] | None:
    """The pattern one site shows by its masks (``off_by(k)`` names a diagonal shifted by k), and the applications
    that show it; None when the site's mask is right."""
    forbidden, past = torch.ones(n, n, dtype=torch.bool).triu(1), torch.ones(n, n, dtype=torch.bool).tril(-1)
    if site.after and not any(a.blocked is not None for a in site.before):
        return "normalisation leak", site.after
    tiny = [a for a in site.before if a.value is not None and -50 < a.value < 0]
    if tiny:
        return "fill value too small", tiny
    blocked, blocking = effective(site)
    added = [a for a in site.before if a.zero_one]
    if added and (blocked is None or not bool(blocked[forbidden].all())):
        return "float 0/1 mask added", added
    if blocked is None:
        return "no mask at all", site.before
    if bool(blocked[forbidden].all()):
        # The future is blocked: right, also where the far past is (a sliding window), unless the diagonal is too.
        return ("diagonal masked", blocking) if bool(blocked[torch.eye(n, dtype=torch.bool)].all()) else None
    if not bool((blocked & forbidden).any()):
        if bool(blocked[past].any()):
            return "inverted", blocking
        queries = [a for a in blocking if a.layout == (n, 1)]
        if queries:
            return "query-axis mask", queries
        rows = [a for a in blocking if a.layout == (1, n)]
        if rows and triangle(rows) is not None:
            return "wrong broadcast", rows
        return "no mask at all", blocking
    for k in range(1, n - 1):
        if torch.equal(blocked, torch.ones(n, n, dtype=torch.bool).triu(k + 1)):
            return off_by(k), blocking
    if bool(blocked[past].any()):  # part of the past blocked, part of the future not
        return "inverted", blocking
    return "partial leak", blocking


def triangle(applied: list[Applied]) -> Node | None:
    """The look-ahead triangle (tril / triu) the applied masks were made from, nearest the scores first."""
    for a in applied:
        if a.mask is not None:
            found = next((n for n in a.mask.lineage() if n.op in TRIANGLES), None)
            if found is not None:
                return found
    return None


def entering(mask: Node, layer: str | None) -> Node:
    """The node of the mask as it entered the layer: the nearest op of its lineage that ran outside the layer
    (the mask the model built and handed to the layer); the mask itself when it was all built inside."""
    if layer is None:
        return mask
    return next((n for n in mask.lineage() if not (n.module == layer or n.module.startswith(layer + "."))), mask)


def narrowed(applied: list[Applied]) -> Node | None:
    """The op that cut one row out of a (length, length) mask (its output has a query axis of 1)."""
    for a in applied:
        for node in a.mask.lineage() if a.mask is not None else []:
            if shape_layout(node.shape)[0] == 1 and any(
                    p is not None and len(p.shape) >= 2 and p.shape[-2] > 1 and p.shape[-1] == node.shape[-1]
                    for p in node.parents):
                return node
    return None


def float_origin(mask: Node) -> Node:
    """The op that made a float mask float: walked back while the inputs are float, the conversion (``.float()``)
    or the creation (``torch.ones`` of a float dtype)."""
    node = mask
    for _ in range(100):
        floats = [p for p in node.parents if p is not None and p.floating]
        if not floats or any(p is not None and not p.floating for p in node.parents):
            return node
        node = floats[0]
    return node
