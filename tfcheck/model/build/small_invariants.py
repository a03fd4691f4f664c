"""Family invariants a small Hugging Face config keeps beyond the sizes (issue 15): relations between config fields
that the defaults satisfy and tfcheck's small values (tfcheck.model.build.small_sizes) would break. Each is read from
the config's fields, its defaults and the values it derives itself, never from a class name:

- grouped-query attention stays grouped (a layer may double its kv heads: MiMo-V2's sliding layers, 8 of 4 heads);
- the parts of a head keep their proportions (a rotary embedding read at head_dim rotates qk_rope_head_dim);
- grouped expert routing fits the small experts (8 groups of 4 experts hold none);
- state-space heads x their width = expand x d_model (Mamba-2's heads, which the config validates);
- a width the config derives by a factor and rounds is exact, as at the defaults (the modeling code may not round);
- sections of the layer stack (input, recurrent, output layers) sum to the layer count and each keeps a layer;
- a section within the stack (Gemma 3n's layers reusing an earlier layer's kv cache, Lfm2-MoE's dense layers
  before the experts) leaves layers outside it, of every kind of layer the stack has.

Plain arithmetic on config objects: importing it imports no torch.
"""
from __future__ import annotations

import copy
import inspect
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

from tfcheck.model.build import names
from tfcheck.model.build.small_sizes import SMALL_BY_QUANTITY

#: The head width the small configs use (d_model 32 over 4 heads).
_SMALL_HEAD = int(SMALL_BY_QUANTITY["HEAD_DIM"])
#: How many times the small width a rounded derived width may ask for (xLSTM's qk_dim: 4 x 32).
_WIDER = 8


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class _Configs:
    """What a rule reads: the default config, the small config as built so far (a namespace of its arguments
    over the signature's defaults where it refuses to build), and the fields tfcheck may set."""

    default: Any
    small: Any
    settable: set[str]
    build: Callable[..., Any]
    values: dict[str, Any]

    def both(self, name: str) -> tuple[Any, Any]:
        return _get(self.default, name), _get(self.small, name)


def _get(config: Any, name: str) -> Any:
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - a heterogeneous config refuses a global read (Gemma 4's head_dim)
        return None


def _first(config: Any, candidates: Iterable[str]) -> tuple[str | None, Any]:
    return next(((n, v) for n in candidates if _int(v := _get(config, n))), (None, None))


def _fields(config: Any) -> list[str]:
    return [n for n in vars(config) if not n.startswith("_")]


def hugging_face_invariants(build: Callable[..., Any], fields: Iterable[str], values: Mapping[str, Any],
                            given: Mapping[str, Any]) -> dict[str, Any]:
    """What a Hugging Face config built by ``build`` from ``values`` (its small values and the user's) needs so that
    the relations its defaults hold still hold. ``fields``: the names its __init__ takes; the user's ``given``
    ones are never changed, nor a field whose default is derived from others (None, "auto"): it follows them."""
    try:
        signature = {n: p.default for n, p in inspect.signature(build).parameters.items()}
        default = build()
    except Exception:  # noqa: BLE001 - a config that refuses is reported by its caller, with its own message
        return {}
    settable = {n for n in set(fields) - set(given) if n in values or _int(signature.get(n))}
    out: dict[str, Any] = {}
    for rule in (_grouped_kv_heads, _exact_width_factors, _head_parts, _expert_groups, _ssm_heads, _layer_sections,
                 _sections_within):
        current = {**values, **out}
        try:
            small = build(**copy.deepcopy(current))
        except Exception:  # noqa: BLE001 - the broken invariant may be what the config refuses (Mamba-2's heads)
            small = SimpleNamespace(**{**{n: v for n, v in signature.items() if v is not inspect.Parameter.empty},
                                       **current})
        try:
            out.update(rule(_Configs(default, small, settable, build, current)))
        except Exception:  # noqa: BLE001 - a config that refuses to be read keeps its values as they are
            continue
    return out


def _grouped_kv_heads(c: _Configs) -> dict[str, Any]:
    """Fewer kv heads than heads by default: fewer in the small config too, the largest count that divides them."""
    (_, heads_was), (_, heads) = _first(c.default, names.NUM_HEADS), _first(c.small, names.NUM_HEADS)
    out = {}
    for n in names.KV_HEADS:
        was, kv = c.both(n)
        if n in c.settable and all(_int(v) for v in (was, kv, heads_was, heads)) and was < heads_was \
                and kv >= heads > 1:
            out[n] = max(d for d in range(1, heads) if heads % d == 0 and d <= was)
    return out


def _exact_width_factors(c: _Configs) -> dict[str, Any]:
    """A width the config derives as d_model x <width>_factor and rounds (xLSTM's qk_dim, up to 64) equals the
    product at the defaults; the modeling code may compute the product unrounded, so the small d_model is the
    smallest multiple of the small one at which the rounding changes nothing."""
    width_name, width = _first(c.small, names.D_MODEL)
    width_was = _get(c.default, width_name) if width_name else None
    if not (_int(width) and _int(width_was)) or width_name not in c.settable:
        return {}
    suffix = names.WIDTH_FACTOR_SUFFIX
    factors = [n for n in _fields(c.default) if n.endswith(suffix) and _number(_get(c.default, n))
               and _int(_get(c.default, n[:-len(suffix)]))]
    kept = [n for n in factors if _get(c.default, n[:-len(suffix)]) == int(width_was * _get(c.default, n))]

    def exact(config: Any, w: int) -> bool:
        return all(_get(config, n[:-len(suffix)]) == int(w * _get(config, n)) for n in kept)

    if not kept or exact(c.small, width):
        return {}
    aliases = [n for n in names.D_MODEL if n in c.settable and c.values.get(n) == width]
    for k in range(2, _WIDER + 1):
        wider = {n: width * k for n in aliases}
        try:
            if exact(c.build(**{**copy.deepcopy(c.values), **wider}), width * k):
                return wider
        except Exception:  # noqa: BLE001 - a width the config refuses is no candidate
            continue
    return {}


def _head_parts(c: _Configs) -> dict[str, Any]:
    """The head widths a config states apart (names.HEAD_PARTS) shrunk by one factor: every equality and sum
    between them holds, and the smallest part common to all is the small head width. Where the defaults make
    heads x head_dim = d_model, head_dim stays d_model / heads."""
    pattern = re.compile(names.HEAD_PARTS)
    parts = {n: v for n in c.settable if pattern.fullmatch(n) and _int(v := _get(c.default, n)) and v > 0}
    if len(parts) < 2:
        return {}
    factor = Fraction(_SMALL_HEAD, math.gcd(*parts.values()))
    (_, heads_was), (_, heads) = _first(c.default, names.NUM_HEADS), _first(c.small, names.NUM_HEADS)
    (width_name, width) = _first(c.small, names.D_MODEL)
    width_was = _get(c.default, width_name) if width_name else None
    if "head_dim" in parts and all(_int(v) and v for v in (heads_was, heads, width, width_was)) \
            and heads_was * parts["head_dim"] == width_was and width % heads == 0:
        anchored = Fraction(width // heads, parts["head_dim"])
        if all((v * anchored).denominator == 1 and v * anchored >= 2 for v in parts.values()):
            factor = anchored
    small = {n: int(v * factor) for n, v in parts.items()}
    return {n: v for n, v in small.items() if _get(c.small, n) != v}


def _expert_groups(c: _Configs) -> dict[str, Any]:
    """Grouped routing over the small experts: the groups divide them, 2 or more experts each (a group's score
    sums its best two), a token routed within fewer groups than there are where the defaults do so, and top-k
    within the experts of those groups."""
    _, experts = _first(c.small, names.NUM_EXPERTS)
    out: dict[str, Any] = {}
    for g in names.EXPERT_GROUPS:
        groups_was, groups = c.both(g)
        if not (_int(experts) and _int(groups) and groups > 0 and experts > 1):
            continue
        if experts % groups or experts // groups < 2:
            if g not in c.settable:
                continue  # the user's groups, kept as given
            groups = max(d for d in range(1, min(groups, experts) + 1) if experts % d == 0 and experts // d >= 2)
            out[g] = groups
        routed = groups
        for t in names.ROUTED_GROUPS:
            t_was, t_small = c.both(t)
            if not (_int(t_small) and _int(t_was)):
                continue
            fewer = _int(groups_was) and t_was < groups_was
            routed = max(1, min(t_small, groups - 1 if fewer else groups))
            if t in c.settable and routed != t_small:
                out[t] = routed
        reach = routed * (experts // groups)
        for k in names.TOP_K:
            top_k = _get(c.small, k)
            if k in c.settable and _int(top_k) and top_k > reach:
                out[k] = reach
    return out


def _ssm_heads(c: _Configs) -> dict[str, Any]:
    """count x width = expand x d_model where the defaults hold it (state-space heads): the small heads keep the
    small head width, their count follows, and the head groups divide the new count."""
    width_name, width = _first(c.small, names.D_MODEL)
    width_was = _get(c.default, width_name) if width_name else None
    if not (_int(width) and _int(width_was)):
        return {}
    fields = [n for n in _fields(c.default) if _int(_get(c.default, n))]
    expands = [n for n in fields if re.fullmatch(names.SSM_EXPAND, n)]
    counts = [n for n in fields if re.fullmatch(names.SSM_HEAD_COUNT, n) or n in names.NUM_HEADS]
    dims = [n for n in fields if re.fullmatch(names.SSM_HEAD_DIM, n)]
    groups = [n for n in fields if re.fullmatch(names.SSM_GROUPS, n)]
    out: dict[str, Any] = {}
    for e in expands:
        for n in counts:
            for d in dims:
                (count_was, count), (dim_was, dim) = c.both(n), c.both(d)
                expand = _get(c.small, e)
                if count_was * dim_was != _get(c.default, e) * width_was or not _int(expand) or n in out:
                    continue
                inner = expand * width
                if _int(count) and count and (dim * count == inner if _int(dim) else inner % count == 0):
                    continue  # holds (a derived width follows the count)
                head = min(dim_was, _SMALL_HEAD)
                if n in c.settable and inner % head == 0:
                    out[n], count = inner // head, inner // head
                    if d in c.settable:
                        out[d] = head
                elif d in c.settable and _int(count) and count and inner % count == 0:
                    out[d] = inner // count
                else:
                    continue
                for g in groups:
                    g_was, g_small = c.both(g)
                    if g in c.settable and _int(g_small) and g_small and count_was % g_was == 0 and count % g_small:
                        out[g] = max(k for k in range(1, g_small + 1) if count % k == 0)
    return out


def _layer_sections(c: _Configs) -> dict[str, Any]:
    """Counts of the sections of the layer stack that sum to the layer count by default: each section keeps one
    layer and the stack holds them (2 layers beside 8 input and 8 output layers run some layers twice)."""
    total_name, total_was = _first(c.default, names.NUM_LAYERS)
    if total_name is None:
        return {}
    sections = [n for n in _fields(c.default) if re.fullmatch(names.LAYER_SECTIONS, n) and n not in names.NUM_LAYERS
                and _int(_get(c.default, n)) and _get(c.default, n) > 0]
    if len(sections) < 2 or sum(_get(c.default, n) for n in sections) != total_was:
        return {}
    small = [_get(c.small, n) for n in sections]
    total = _get(c.small, total_name)
    if all(_int(v) and v >= 1 for v in small) and sum(small) == total:
        return {}
    out: dict[str, Any] = {n: 1 for n in sections if n in c.settable}
    if total_name in c.settable:
        out[total_name] = len(sections) if len(out) == len(sections) else max(total or 0, len(sections))
    return out


def _sections_within(c: _Configs) -> dict[str, Any]:
    """Sections of the stack counted apart from the rest (not summing to the layer count with other sections)
    that leave layers outside them by default: in the small stack too, each section a layer and the rest a layer
    of every kind (names.LAYER_KINDS_VIEW), the kinds a section's layers reuse the cache of."""
    total_name, total_was = _first(c.default, names.NUM_LAYERS)
    if total_name is None:
        return {}
    sections = [n for n in _fields(c.default) if re.fullmatch(names.LAYER_SECTIONS, n) and n not in names.NUM_LAYERS
                and _int(v := _get(c.default, n)) and 0 < v < total_was]
    if not sections or sum(_get(c.default, n) for n in sections) == total_was:
        return {}  # none, or sections that tile the stack (_layer_sections)
    kinds = len(set(_get(c.default, names.LAYER_KINDS_VIEW) or ())) or 1
    small = {n: _get(c.small, n) for n in sections}
    total = _get(c.small, total_name)
    if not all(_int(v) for v in small.values()) or not _int(total) or total - sum(small.values()) >= kinds:
        return {}
    out: dict[str, Any] = {n: 1 for n, v in small.items() if n in c.settable and v > 1}
    inside = sum(out.get(n, v) for n, v in small.items())
    if total - inside < kinds and total_name in c.settable:
        out[total_name] = inside + kinds
    return out
