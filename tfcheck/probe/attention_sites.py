"""Attention sites in a recorded forward: where a model multiplies queries with keys, normalises the
scores with a softmax, mixes the values with the probabilities, and merges the heads back before the
output projection. Shared by the attention checks (heads, scale, softmax axis).

A site is found from the ops, never from a class name:
- an explicit site is a product of two activations (``matmul``, ``@``, ``bmm``, ``baddbmm``, a
  two-operand ``einsum``) whose result is the input of a ``softmax``, followed by a product of the
  probabilities with another activation;
- ``F.scaled_dot_product_attention`` is a site by itself (its scores are never materialised);
- inside an opaque call (``nn.MultiheadAttention``'s ``multi_head_attention_forward``) the same pattern
  is read at the aten level (``bmm`` / ``_softmax`` / ``bmm``), which ``visible_attention()`` exposes.
The merge is the activation entering the first projection (a product with a parameter) after the
value product.

Tensors are captured through the recorder's ``on_op`` (detached copies, forward phase only), so a check
reads the real q, k, v, scores and context of one batched probe.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from tfcheck.probe.score_flow import PRODUCTS, PROJECTIONS, ScoreFlow
from tfcheck.recording.recorder import OpEvent, Recording, tensors_in
from tfcheck.recording.tensor_storage import owned_storages, storage_address

SOFTMAXES = frozenset({"softmax", "_softmax", "_safe_softmax"})
SDPA = "scaled_dot_product_attention"
_CAPTURED = PRODUCTS | SOFTMAXES | PROJECTIONS | {SDPA}


@dataclass
class Operand:
    """A tensor as it entered (or left) an attention op, with the axis holding the batch (possibly merged
    with the heads, batch outermost) and the axis holding positions."""

    tensor: torch.Tensor
    batch_axis: int
    position_axis: int

    @property
    def length(self) -> int:
        return int(self.tensor.shape[self.position_axis])

    def by_position(self, batch: int) -> torch.Tensor | None:
        """The tensor as (batch, position, group, features): group is the heads (1 where there are none).
        None when the batch axis does not hold ``batch`` samples."""
        t = self.tensor
        if t.dim() < 2:
            return None
        bax, pax = self.batch_axis % t.dim(), self.position_axis % t.dim()
        if bax == pax:
            return None
        n = int(t.shape[bax])
        if n % batch:
            return None
        if n != batch:  # (batch * heads, ...) as bmm sees it: batch outermost
            t = t.unflatten(bax, (batch, n // batch))
            pax += pax > bax
            bax_heads = bax + 1
            t = t.movedim((bax, pax, bax_heads), (0, 1, 2))
            return t.flatten(3) if t.dim() > 3 else t.unsqueeze(-1)
        t = t.movedim((bax, pax), (0, 1))
        if t.dim() == 2:
            return t[:, :, None, None]
        if t.dim() == 3:
            return t[:, :, None, :]
        return t.flatten(2, -2)


@dataclass
class AttentionSite:
    """One attention computation of the forward."""

    form: str  # "explicit" (product, softmax, product) or "sdpa"
    module: str
    file: str | None
    line: int | None
    score_op: OpEvent
    value_op: OpEvent
    query: Operand
    key: Operand
    value: Operand
    context: Operand
    softmax_op: OpEvent | None = None
    #: the score product's output and its (query, key) axes; None for sdpa, which never materialises it
    scores: torch.Tensor | None = None
    score_axes: tuple[int, int] | None = None
    #: the size of the axis the score product sums over (d_k in a correct attention)
    contracted: int | None = None
    probabilities: torch.Tensor | None = None
    softmax_dim: int | None = None
    #: the activation entering the first projection after the value product, and that op
    merged: torch.Tensor | None = None
    merge_op: OpEvent | None = None
    #: sdpa arguments: is_causal, scale, the attention mask's shape
    options: dict = field(default_factory=dict)
    #: the last view/reshape/transpose/permute before the score product that produced q, k or v: where
    #: the heads were split (None where no such op ran at the Python level)
    shaped_by: dict = field(default_factory=dict)
    projected_from: dict = field(default_factory=dict)  # "q"/"k"/"v" -> what its projection read (record_sites)
    #: "q"/"k" -> the gather that put its tokens in an order ranked from activations (routing attention)
    routed_by: dict = field(default_factory=dict)

    @property
    def score_lengths(self) -> tuple[int, int]:
        """(length_q, length_k) as the scores are laid out: read off the score tensor where there is one,
        else off the query and key operands (sdpa forms q·kᵀ from them)."""
        if self.scores is not None and self.score_axes is not None:
            return int(self.scores.shape[self.score_axes[0]]), int(self.scores.shape[self.score_axes[1]])
        return self.query.length, self.key.length

    def where(self, op: OpEvent | None = None) -> tuple[str, str | None, int | None]:
        op = op or self.score_op
        return op.module, op.file, op.line


@dataclass
class CapturedOp:
    """One recorded op kept by ``SiteCollector`` with copies of its tensors: the sites are found from these,
    and attention.scale reads the score op's operands from them again."""

    event: OpEvent
    operands: list[torch.Tensor | None]  # None where the operand is a parameter or buffer
    out: torch.Tensor | None
    extra: dict


class SiteCollector:
    """``on_op`` for ``ctx.record``: keeps copies of the tensors of the ops that can make up a site."""

    def __init__(self, model: nn.Module):
        self._owned = owned_storages((*model.parameters(), *model.buffers()))
        self.captured: list[CapturedOp] = []
        self.flow = ScoreFlow(self._is_owned)
        #: the values of the one-element tensors the model's ops read, by tensor identity (a tensor-valued scale)
        self.scalar_values: dict[int, float] = {}

    def __call__(self, event: OpEvent, args: tuple, kwargs: dict, out: Any) -> None:
        self.flow(event, args, kwargs, out)
        if event.model_forward:
            self._keep_scalars(args, kwargs)
        if event.phase != "forward" or event.short_name not in _CAPTURED:
            return
        operands, extra = _operands(event.short_name, args, kwargs)
        if event.short_name in SOFTMAXES:  # the products what it normalises was made from (None: unknown)
            extra["made_by"] = self.flow.tags(args[0] if args else kwargs.get("input"))
        kept = [None if t is None or self._is_owned(t) else t.detach().clone() for t in operands]
        if event.short_name in PROJECTIONS and not any(t is not None and self._is_owned(t) for t in operands):
            extra["no_parameter"] = True
        result = out[0] if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor) else out
        self.captured.append(CapturedOp(event, kept, result.detach().clone() if isinstance(result, torch.Tensor)
                                       else None, extra))

    def _keep_scalars(self, args: tuple, kwargs: dict) -> None:
        for t in tensors_in((args, kwargs)):
            if t.numel() == 1 and t.device.type != "meta" and not t.is_complex():
                try:
                    self.scalar_values[id(t)] = float(t.detach())
                except (RuntimeError, TypeError, ValueError):  # a tensor subclass without values
                    continue

    def _is_owned(self, t: torch.Tensor) -> bool:
        address = storage_address(t)
        return address is not None and address in self._owned

    def sites(self, recording: Recording) -> list[AttentionSite]:
        return find_sites(recording, self.captured)


def _operands(name: str, args: tuple, kwargs: dict) -> tuple[list[torch.Tensor | None], dict]:
    tensors = lambda *xs: [x if isinstance(x, torch.Tensor) else None for x in xs]  # noqa: E731
    if name == "einsum":
        rest = args[1:]
        if len(rest) == 1 and isinstance(rest[0], (list, tuple)):
            rest = tuple(rest[0])
        return tensors(*rest), {"equation": args[0] if args and isinstance(args[0], str) else None}
    if name == "baddbmm":  # baddbmm(input, batch1, batch2), also by keyword (Bloom's alibi.baddbmm(batch1=q, ...))
        return tensors(kwargs.get("batch1", args[1] if len(args) > 1 else None),
                       kwargs.get("batch2", args[2] if len(args) > 2 else None)), {}
    if name == "__rmatmul__":  # a.__rmatmul__(b) is b @ a
        return tensors(*args[1:2], *args[:1]), {}
    if name in SOFTMAXES:
        dim = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], int) else None)
        return tensors(*args[:1]), {"dim": dim}
    if name == SDPA:
        names = ("query", "key", "value", "attn_mask")
        got = [args[i] if i < len(args) else kwargs.get(n) for i, n in enumerate(names)]
        mask = got[3]
        return tensors(*got[:3]), {
            "is_causal": bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False)),
            "scale": kwargs.get("scale"),
            "attn_mask": tuple(mask.shape) if isinstance(mask, torch.Tensor) else None}
    if name == "addmm":
        return tensors(*args[1:3]), {}
    return tensors(*args[:2]), {}


# ----- finding sites ---------------------------------------------------------------------------------

def find_sites(recording: Recording, captured: list[CapturedOp]) -> list[AttentionSite]:
    """Every attention site in execution order."""
    ops = [c for c in captured if _visible(c.event, recording)]
    sites: list[AttentionSite] = []
    boundary = 0
    for i, op in enumerate(ops):
        site = None
        if op.event.short_name == SDPA:
            site = _sdpa_site(op)
            used = i
        elif op.event.short_name in SOFTMAXES:
            found = _explicit_site(ops, i, boundary)
            if found is not None:
                site, used = found
        if site is None:
            continue
        _attach_merge(site, ops, used)
        _attach_shaping(site, recording)
        sites.append(site)
        boundary = used + 1
    return sites


def _visible(event: OpEvent, recording: Recording) -> bool:
    """Function-level ops, and aten ops where no captured function-level op covers them (the insides of
    nn.MultiheadAttention, or a model run below the Python level)."""
    if event.level == "function":
        return True
    parent = event.parent_op
    return parent is None or recording.ops[parent].short_name not in _CAPTURED


def _sdpa_site(op: CapturedOp) -> AttentionSite | None:
    q, k, v = (op.operands + [None] * 3)[:3]
    if q is None or k is None or v is None or op.out is None or min(q.dim(), k.dim(), v.dim()) < 3:
        return None
    e = op.event
    return AttentionSite("sdpa", e.module, e.file, e.line, e, e, Operand(q, 0, -2), Operand(k, 0, -2),
                         Operand(v, 0, -2), Operand(op.out, 0, -2), contracted=int(q.shape[-1]),
                         options=dict(op.extra))


def _explicit_site(ops: list[CapturedOp], i: int, boundary: int) -> tuple[AttentionSite, int] | None:
    soft = ops[i]
    probs_in, probs = soft.operands[0] if soft.operands else None, soft.out
    if probs_in is None or probs is None or probs.dim() < 2:
        return None
    made_by = soft.extra.get("made_by")
    score = next((ops[j] for j in range(i - 1, boundary - 1, -1) if _forms(ops[j], probs_in)
                  and (made_by is None or ops[j].event.index in made_by)), None)
    if score is None:
        return None
    axes = _score_axes(score)
    if axes is None:
        return None
    query, key, score_axes, contracted = axes
    for j in range(i + 1, len(ops)):
        name = ops[j].event.short_name
        if name in SOFTMAXES or name == SDPA:
            return None
        mixed = _mixes(ops[j], probs)
        if mixed is not None:
            value, context = mixed
            e = score.event
            site = AttentionSite("explicit", e.module, e.file, e.line, e, ops[j].event, query, key, value, context,
                                 soft.event, score.out, score_axes, contracted, probs, soft.extra.get("dim"))
            return site, j
    return None


def _is_product_of_activations(op: CapturedOp) -> bool:
    return op.event.short_name in PRODUCTS and len(op.operands) == 2 and all(
        t is not None and t.dim() >= 2 for t in op.operands) and op.out is not None


def _forms(op: CapturedOp, probs_in: torch.Tensor) -> bool:
    """The product's output is shaped as what the softmax normalised; that the softmax input was computed from
    it (scaled, masked or re-viewed since, never through a projection) the caller reads off the flow's tags."""
    out = op.out
    return _is_product_of_activations(op) and out is not None and out.numel() == probs_in.numel() and \
        tuple(out.shape[-2:]) == tuple(probs_in.shape[-2:])


def _score_axes(op: CapturedOp) -> tuple[Operand, Operand, tuple[int, int], int] | None:
    a, b = op.operands
    assert a is not None and b is not None  # a product of two activations (_forms)
    if op.event.short_name == "einsum":
        return _einsum_score_axes(op.extra.get("equation"), a, b, op.out)
    if a.dim() < 3 or b.dim() < 3:
        return None
    # a @ b with b = kᵀ: queries along a's rows, keys along b's columns
    return Operand(a, 0, -2), Operand(b, 0, -1), (-2, -1), int(a.shape[-1])


def _mixes(op: CapturedOp, probs: torch.Tensor) -> tuple[Operand, Operand] | None:
    """(values, context) when ``op`` multiplies the probabilities with another activation."""
    if not _is_product_of_activations(op):
        return None
    shape = lambda t: (t.numel(), tuple(t.shape[-2:]))  # noqa: E731
    a, b = op.operands
    if op.event.short_name == "einsum":
        return _einsum_mix_axes(op.extra.get("equation"), a, b, op.out, probs)
    side = 0 if shape(a) == shape(probs) else 1 if shape(b) == shape(probs) else None
    if side is None:
        return None
    values = b if side == 0 else a
    assert values is not None and op.out is not None  # a product of two activations (checked above)
    if values.dim() < 3:
        return None
    return Operand(values, 0, -2), Operand(op.out, 0, -2)


def _parse_einsum(equation: str | None) -> tuple[str, str, str] | None:
    if not equation or "..." in equation or "->" not in equation:
        return None
    inputs, out = equation.replace(" ", "").split("->")
    parts = inputs.split(",")
    return (parts[0], parts[1], out) if len(parts) == 2 else None


def _einsum_score_axes(equation, a, b, out) -> tuple[Operand, Operand, tuple[int, int], int] | None:
    parsed = _parse_einsum(equation)
    if parsed is None:
        return None
    sa, sb, so = parsed
    only_a = [c for c in so if c in sa and c not in sb]
    only_b = [c for c in so if c in sb and c not in sa]
    shared = [c for c in so if c in sa and c in sb]
    if not only_a or len(only_b) != 1 or not shared or shared[0] != so[0] or sa[0] != so[0] or sb[0] != so[0]:
        return None
    summed = [c for c in sa if c in sb and c not in so]
    if len(summed) != 1:
        return None
    q, k = _query_axis(only_a, so, so.index(only_b[0])), only_b[0]
    if q is None:
        return None
    return Operand(a, 0, sa.index(q)), Operand(b, 0, sb.index(k)), (so.index(q), so.index(k)), \
        int(a.shape[sa.index(summed[0])])


def _einsum_mix_axes(equation, a, b, out, probs) -> tuple[Operand, Operand] | None:
    parsed = _parse_einsum(equation)
    if parsed is None:
        return None
    sa, sb, so = parsed
    if a.numel() == probs.numel() and tuple(a.shape) == tuple(probs.shape):
        sp, sv, values = sa, sb, b
    elif b.numel() == probs.numel() and tuple(b.shape) == tuple(probs.shape):
        sp, sv, values = sb, sa, a
    else:
        return None
    summed = [c for c in sp if c in sv and c not in so]
    queries = [c for c in so if c in sp and c not in sv]
    if len(summed) != 1 or sv[0] != so[0]:
        return None
    query = _query_axis(queries, sp, sp.index(summed[0]))
    if query is None:
        return None
    return Operand(values, 0, sv.index(summed[0])), Operand(out, 0, so.index(query))


def _query_axis(candidates: list[str], layout: str, key_at: int) -> str | None:
    """The query axis among ``candidates`` (axes only the queries' side has): the one there is; with keys and values
    shared by the heads (multi-query, ``b h i d, b j d -> b h i j``: h is one too) the one before the key axis."""
    before = layout[key_at - 1] if key_at > 0 else None
    return candidates[0] if len(candidates) == 1 else before if before in candidates else None


def _attach_merge(site: AttentionSite, ops: list[CapturedOp], used: int) -> None:
    """The activation entering the first projection after the value product: where the heads are merged
    back, if the numbers of elements agree."""
    for op in ops[used + 1:]:
        name = op.event.short_name
        if name in SOFTMAXES or name == SDPA:
            return
        if name not in PROJECTIONS or op.extra.get("no_parameter"):
            continue
        activation = next((t for t in op.operands if t is not None), None)
        if activation is not None and activation.numel() == site.context.tensor.numel():
            site.merged, site.merge_op = activation, op.event
        return


#: Function-level ops that lay out heads.
SHAPING = frozenset({"view", "reshape", "transpose", "permute", "unflatten", "split", "chunk", "flatten", "movedim",
                     "swapaxes", "contiguous", "rearrange", "mT"})


def _attach_shaping(site: AttentionSite, recording: Recording) -> None:
    start = site.score_op.index
    for name, operand in (("q", site.query), ("k", site.key), ("v", site.value)):
        shape = tuple(operand.tensor.shape)
        site.shaped_by[name] = next(
            (op for op in reversed(recording.ops[:start]) if op.level == "function" and op.phase == "forward"
             and op.short_name in SHAPING and any(m.shape == shape for m in op.outputs)), None)
